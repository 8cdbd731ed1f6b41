#!/usr/bin/env bash
# Model-checks the var queue (engine/model/varq.pml, issue #22 item 4) with
# spin: first that the model's citations of the C code still match it
# (engine/model/check_names.py), then an exhaustive search of every
# interleaving of each configuration, which must find no error, then the
# model's mutants, each of which must be caught (the check can fail). Prints
# the states, depth, memory and time of each run; fails on any error, on a
# search that did not complete, and on a mutant that passes. Works in a
# temporary directory; about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$PWD/engine/model/varq.pml

if ! command -v spin >/dev/null; then
  echo "spin_check: spin is not installed (scripts/setup.sh installs the Debian package spin)" >&2
  exit 1
fi
python3 engine/model/check_names.py

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME EXPECT SPIN_DEFINES CC_FLAGS PAN_FLAGS: generates and compiles
# the verifier for the defines in its own directory, runs it, and writes its
# report to NAME/report and NAME/status (ok or FAILED). The defines and flags
# are lists, split into words on purpose.
# shellcheck disable=SC2086
run() {
  local name=$1 expect=$2 defs=$3 ccflags=$4 flags=$5 d=$work/$1
  mkdir -p "$d"
  cp "$model" "$d/varq.pml"
  (
    cd "$d"
    status=FAILED
    # Exhaustive: -DSAFETY (assertions and end states, no cycles to look
    # for: every wait in the model blocks instead of spinning), -DCOLLAPSE
    # (lossless compression of stored states), a 4 GiB ceiling.
    if ! spin $defs -a varq.pml >spin.log 2>&1 ||
       ! cc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=4096 $ccflags -o pan pan.c >cc.log 2>&1; then
      echo "$name: could not build the verifier: $(cat spin.log cc.log | head -5)" >report
      echo "$status" >status
      exit 0
    fi
    start=$(date +%s%N)
    timeout 600 ./pan -m10000 -n $flags >pan.log 2>&1 || true
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | head -1)
    states=$(awk '/states, stored/ {print $1; exit}' pan.log)
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' pan.log | head -1)
    mem=$(awk '/total actual memory usage/ {print $1; exit}' pan.log)
    stats="${states:-?} states, depth ${depth:-?}, ${mem:-?} MB, $((ms / 1000)).$((ms % 1000 / 100)) s"
    if [ "$expect" = pass ]; then
      if [ "$errors" = 0 ] && ! grep -q "Search not completed\|max search depth too small\|out of memory" pan.log; then
        status=ok
        echo "$name: no error, exhaustive: $stats" >report
      else
        echo "$name: FAILED ($stats): $(grep -m1 '^pan' pan.log || tail -3 pan.log)" >report
        if [ -f varq.pml.trail ]; then
          keep=${TMPDIR:-/tmp}/varq-spin-$name
          rm -rf "$keep" && mkdir -p "$keep" && cp varq.pml varq.pml.trail "$keep/"
          echo "  counterexample: $(wc -l <varq.pml.trail) steps; replay it with" \
               "(cd $keep && spin -t -p $defs varq.pml)" >>report
          spin -t $defs varq.pml 2>&1 | grep -E '^ *[0-9]+:\s+proc' | tail -6 >>report || true
        fi
      fi
    else
      if [ -n "$errors" ] && [ "$errors" != 0 ] && [ -f varq.pml.trail ]; then
        status=ok
        echo "$name: caught as it must be, counterexample of $(wc -l <varq.pml.trail) steps" \
             "($stats): $(grep -m1 '^pan:1:' pan.log | sed 's/^pan:1: //')" >report
        if grep -q '^pan:1: invalid end state' pan.log; then
          # who stopped where, and the ops left waiting
          spin -t $defs varq.pml >replay.log 2>&1 || true
          grep -E '^ *[0-9]+:\s+proc' replay.log | grep -v 'valid end state' |
            sed -e 's/^ *[0-9]*:\s*/    stuck: /' \
                -e 's/(:init::1) .*/(:init:) at (completed == NOPS): not every op completed/' >>report || true
          awk -F'[][ =]+' '/^\t\tticket\[/ {t[$2] = $3}
                           /^\t\top\[.*\]\.wait/ && $4 > 0 {w[$2] = $4}
                           END {for (k = 0; k < 8; k++) if (k in w) s = s sprintf(" op%s (%s, wait %s)", k, t[k] == 255 ? "being pushed" : "ticket " t[k], w[k])
                                if (s != "") print "    left waiting:" s}' replay.log >>report || true
        fi
      else
        echo "$name: FAILED: the mutant passed, so the check could not tell ($stats)" >report
      fi
    fi
    echo "$status" >status
  )
}

# Configurations (see the end of varq.pml), then mutants of configuration 1.
# Each is: name, expected verdict, spin defines, cc flags, pan flags. The
# mutants search breadth-first (-DBFS), for the shortest counterexample;
# the second run of mutant 1 ignores end states (-E) to show that the
# serial-equivalence check alone catches it too (depth-first: that
# assertion fires only at the end of a run).
jobs=(
  "config2|pass|-DCONFIG=2||-w25"
  "config1|pass|-DCONFIG=1||-w24"
  "config1-fine|pass|-DCONFIG=1 -DFINE=1||-w24"
  "mutant1-per-var-append|fail|-DMUTANT=1|-DBFS|-w24"
  "mutant1-per-var-append-serial|fail|-DMUTANT=1||-w24 -E"
  "mutant2-read-passes-write|fail|-DMUTANT=2|-DBFS|-w24"
  "mutant3-lock-order|fail|-DMUTANT=3|-DBFS|-w24"
  "mutant4-early-write-grant|fail|-DMUTANT=4|-DBFS|-w24"
  "mutant5-deletion-as-read|fail|-DMUTANT=5|-DBFS|-w24"
)

echo "spin_check: $(spin -V)"
# The largest first, beside the others: two at a time.
pids=()
for j in "${jobs[@]}"; do
  IFS='|' read -r name expect defs ccflags flags <<<"$j"
  run "$name" "$expect" "$defs" "$ccflags" "$flags" &
  pids+=($!)
  if [ ${#pids[@]} -ge "${VARQ_SPIN_JOBS:-2}" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
wait

fail=0
for j in "${jobs[@]}"; do
  name=${j%%|*}
  cat "$work/$name/report"
  [ "$(cat "$work/$name/status")" = ok ] || fail=1
done
if [ "$fail" != 0 ]; then
  echo "spin_check: FAILED" >&2
  exit 1
fi
echo "spin_check: the var queue model holds in every configuration, and every mutant is caught"
