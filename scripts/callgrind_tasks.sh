#!/usr/bin/env bash
# Instructions per task, counted by callgrind (exact and repeatable where
# timings on a shared machine are not): each runtime of the engine
# benchmarks runs each pattern -- independent empty tasks, a chain on one
# var, fan-out (one writer, eight readers) -- at two sizes with one worker,
# and the difference of the two totals over the difference of the task
# counts is the cost of one task, without start-up and teardown. Every
# thread's instructions count: the pusher's, the worker's, and what either
# spends waiting (a spinning thread shows up here, a sleeping one does not).
# Set-up outside the timing in engine_bench counts here: varq-opr's
# independent tasks are n distinct prebuilt ops, so its figure includes
# vq_opr_new and vq_opr_free of each.
#
# usage: scripts/callgrind_tasks.sh [BUILD_DIR]   (scripts/bench.sh --callgrind)
#   CALLGRIND_TASKS="20000 40000" sets the two sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
read -r n1 n2 <<<"${CALLGRIND_TASKS:-20000 40000}"
command -v valgrind >/dev/null || { echo "callgrind_tasks.sh: valgrind not found" >&2; exit 1; }
ninja -C "$b" bench/bench_varq >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# runtime label, binary, --rt name (or "")
runtimes=("varq|$b/bench/bench_varq|varq" "varq-opr|$b/bench/bench_varq|varq-opr"
          "varq-naive|$b/bench/bench_varq|varq-naive")
[ -x "$b/bench/bench_omp_gcc" ] && runtimes+=("libgomp|$b/bench/bench_omp_gcc|")
[ -x "$b/bench/bench_omp_clang" ] && runtimes+=("libomp|$b/bench/bench_omp_clang|")
[ -x "$b/bench/bench_starpu" ] && runtimes+=("starpu|$b/bench/bench_starpu|")

# Total instructions of one run.
count() {
  local bin=$1 rt=$2 only=$3 n=$4 out="$tmp/cg.out"
  local args=(--workers 1 --only "$only" --tasks "$n")
  [ -n "$rt" ] && args+=(--rt "$rt")
  # libomp's idle threads spin for 200 ms after a region: not the tasks' cost
  OMP_NUM_THREADS=1 KMP_BLOCKTIME=0 STARPU_HOME="$tmp" STARPU_SILENT=1 \
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "${args[@]}" >/dev/null 2>"$tmp/err" ||
    { echo "callgrind_tasks.sh: $bin ${args[*]} failed:" >&2; cat "$tmp/err" >&2; exit 1; }
  sed -n 's/^summary: //p; s/^totals: //p' "$out" | head -1
}

echo "instructions per task (callgrind, 1 worker, ($n2 - $n1) tasks' difference)"
printf '%-12s %12s %12s %12s\n' runtime independent chain fan-out
for entry in "${runtimes[@]}"; do
  IFS='|' read -r label bin rt <<<"$entry"
  line=$(printf '%-12s' "$label")
  for only in a b c; do
    c1=$(count "$bin" "$rt" $only "$n1")
    c2=$(count "$bin" "$rt" $only "$n2")
    # fan-out runs n / 9 rounds of 9 tasks
    t1=$n1 t2=$n2
    [ $only = c ] && t1=$(( n1 / 9 * 9 )) t2=$(( n2 / 9 * 9 ))
    line+=$(printf ' %12.0f' "$(echo "($c2 - $c1) / ($t2 - $t1)" | bc -l)")
  done
  echo "$line"
done
echo "(varq-opr independent: includes vq_opr_new and vq_opr_free of each of its n ops)"
