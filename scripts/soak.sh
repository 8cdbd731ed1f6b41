#!/usr/bin/env bash
# The soak (issue #22 item 5): tests/soak.c for DURATION seconds (default
# 1800) in the normal build, the AddressSanitizer + UndefinedBehaviorSanitizer
# build and the ThreadSanitizer build, each on the CPU and in GPU mode (the
# emulated backend; both modes of one build run at once), then a table of
# the figures. Each run fails on a wrong value, a lost or doubled callback,
# a sanitizer report, a hang (its watchdog: no round done in 60 s), live
# tensor bytes that pile up, or memory that grew more than 10% after
# warm-up (a quarter of the time): the resident set in the normal build,
# the sanitizer allocator's live bytes under ASan and TSan (their
# allocators map more than the program holds; RSS reported; see
# SANITIZER_LONG_S in tests/soak.c). The suite runs the same program for 20 s (normal) or 60 s
# (sanitizers) per mode (tests/meson.build: soak, soak_gpu).
#
# usage: scripts/soak.sh [DURATION]
#   SOAK_BUILDS="normal asan tsan" picks the builds; SOAK_DIR_NORMAL,
#   SOAK_DIR_ASAN, SOAK_DIR_TSAN the build directories (default build,
#   build-asan, build-tsan, configured the way scripts/test.sh does). Logs go to $SOAK_LOGS (default
#   build-soak-logs/, which git ignores).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-1800}
case $duration in
  '' | *[!0-9]*) echo "usage: scripts/soak.sh [DURATION in seconds]" >&2; exit 2 ;;
esac

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

logs=${SOAK_LOGS:-build-soak-logs}
mkdir -p "$logs"

configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

# One build: configure, build the program, run both modes at once.
soak_build() {
  local name=$1 dir=$2; shift 2
  echo "== $name ($dir): building tests/soak"
  configure "$dir" "$@"
  ninja -C "$dir" tests/soak >/dev/null
  echo "== $name: soak $duration s, CPU and GPU mode at once (logs in $logs/)"
  local pids=() mode
  for mode in cpu gpu; do
    local args=("$duration")
    [ $mode = gpu ] && args+=(--gpu)
    ( start=$(date +%s)
      rc=0
      VARQ_GPU_BACKEND=emulated "$dir/tests/soak" "${args[@]}" >"$logs/$name-$mode.log" 2>&1 || rc=$?
      echo "soak.sh: exit $rc after $(( $(date +%s) - start )) s" >>"$logs/$name-$mode.log"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
}

builds=${SOAK_BUILDS:-normal asan tsan}
for b in $builds; do
  case $b in
    normal) soak_build normal "${SOAK_DIR_NORMAL:-build}" ;;
    asan) soak_build asan "${SOAK_DIR_ASAN:-build-asan}" \
            -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled ;;
    tsan) soak_build tsan "${SOAK_DIR_TSAN:-build-tsan}" -Db_sanitize=thread -Db_lundef=false \
            -Dcuda=disabled ;;
    *) echo "soak.sh: unknown build $b (normal, asan, tsan)" >&2; exit 2 ;;
  esac
done

# The table: one line per build and mode, from the program's summary.
echo
printf '%-6s %-4s %6s %7s %10s %10s %9s %8s %8s %8s %7s  %s\n' build mode time rounds \
  'eng ops' 'runs' 'fail.runs' 'RSS warm' 'final' peak growth result
status=0
for b in $builds; do
  for mode in cpu gpu; do
    log=$logs/$b-$mode.log
    line=$(awk -v b="$b" -v m="$mode" '
      /^soak: [0-9]+ s/ { t = $2; r = $(NF - 1) }
      /engine: .* workload ops ran/ { w = $3; p = $0; sub(/.* ops pushed, /, "", p); sub(/ ran,.*/, "", p) }
      /executor:/ { n = $0; sub(/.*programs, /, "", n); x = n; sub(/ runs.*/, "", x)
                    f = n; sub(/.*runs \(/, "", f); sub(/ failing.*/, "", f) }
      /RSS MiB: warm-up/ { s = $0; sub(/.*warm-up /, "", s); split(s, a, " "); wu = a[1]
                           s = $0; sub(/.*final /, "", s); split(s, c, " "); fi = c[1]; g = c[2]
                           s = $0; sub(/.*peak /, "", s); split(s, d, ";"); pk = d[1] }
      /^soak: (ok|FAILED)$/ { res = $2 }
      /^soak.sh: exit/ { ex = $3 }
      END {
        if (res == "") res = "NO SUMMARY (exit " ex ")"
        else if (ex != 0 && res == "ok") res = "exit " ex
        gsub(/[(),]/, "", g)
        printf "%-6s %-4s %5ss %7s %10s %10s %9s %8s %8s %8s %7s  %s", b, m, t, r, w + p, x, f, wu, fi, pk, g, res
      }' "$log")
    echo "$line"
    case $line in *' ok') ;; *) status=1 ;; esac
  done
done
echo "(eng ops: engine ops that ran, workload and long-lived engine; RSS in MiB; logs in $logs/)"
exit $status
