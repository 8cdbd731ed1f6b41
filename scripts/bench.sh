#!/usr/bin/env bash
# Runs the engine benchmarks: varq (threaded, prebuilt ops, naive), StarPU
# and OpenMP tasks (libgomp, libomp) on the same workloads, one runtime after
# another, and prints the comparison; then again for independent ops and the
# chain beside two busy loops at nice 10 (a shared machine). The results also go to
# build/bench/engine_bench.json, and the block between the bench markers of
# docs/perf/engine.md is rewritten from them (with the machine and the
# date). Then the graph executor's benchmark (exec_bench: prepare time
# against program size, run cost per op against raw engine ops) runs, its
# results go to build/bench/exec_bench.json and its table into
# docs/perf/executor.md between the exec-bench markers. Then training
# against PyTorch (train_bench.sh), whose table goes into
# docs/perf/training.md between the train-bench markers, and imported models
# and loops against PyTorch (printed only: docs/perf/models.md and
# docs/perf/training.md say how to read them).
#   scripts/bench.sh [engine_bench options, e.g. --reps 3 --workers 1,2]
#   scripts/bench.sh --callgrind   instructions per task instead, counted by
#                                  callgrind (scripts/callgrind_tasks.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
if [ "${1:-}" = --callgrind ]; then
  exec scripts/callgrind_tasks.sh build
fi
out=build/bench/engine_bench.txt
json=build/bench/engine_bench.json
STARPU_HOME="$PWD/build/bench" build/bench/engine_bench --json "$json" "$@" | tee "$out"

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
python3 - "$out" "$cpu" "$(nproc)" "$(date -u +%Y-%m-%d)" <<'PY'
import re, sys
out, cpu, cores, date = sys.argv[1:5]
text = open(out).read()
start = text.find("runtimes:")
body = text[start:].rstrip() if start >= 0 else text.rstrip()
section = (f"Measured on {date}, {cores} cores ({cpu}), by `scripts/bench.sh`:\n\n"
           "```\n" + body + "\n```\n")
page = "docs/perf/engine.md"
doc = open(page).read()
pat = re.compile(r"(<!-- bench:start -->\n).*?(<!-- bench:end -->)", re.S)
if not pat.search(doc):
    sys.exit(f"{page} has no <!-- bench:start --> / <!-- bench:end --> markers")
open(page, "w").write(pat.sub(lambda m: m.group(1) + section + m.group(2), doc))
print(f"{page}: engine benchmark updated")
PY

# The same independent and chain workloads beside two busy loops at nice 10
# (engine_bench --load 2): how each runtime degrades on a shared machine.
# Printed, and kept in build/bench/engine_bench_load.txt.
STARPU_HOME="$PWD/build/bench" build/bench/engine_bench --load 2 --only ab --workers 1,2 \
  | sed -n '/^runtimes:/,$p' | tee build/bench/engine_bench_load.txt

eout=build/bench/exec_bench.txt
ejson=build/bench/exec_bench.json
build/bench/exec_bench --json "$ejson" | tee "$eout"
python3 - "$eout" "$cpu" "$(nproc)" "$(date -u +%Y-%m-%d)" <<'PY'
import re, sys
out, cpu, cores, date = sys.argv[1:5]
body = open(out).read().rstrip()
section = (f"Measured on {date}, {cores} cores ({cpu}), by `scripts/bench.sh`:\n\n"
           "```\n" + body + "\n```\n")
page = "docs/perf/executor.md"
doc = open(page).read()
pat = re.compile(r"(<!-- exec-bench:start -->\n).*?(<!-- exec-bench:end -->)", re.S)
if not pat.search(doc):
    sys.exit(f"{page} has no <!-- exec-bench:start --> / <!-- exec-bench:end --> markers")
open(page, "w").write(pat.sub(lambda m: m.group(1) + section + m.group(2), doc))
print(f"{page}: executor benchmark updated")
PY

# Training steps per second against PyTorch (scripts/train_bench.sh): its
# markdown block replaces the train-bench block of docs/perf/training.md.
tout=build/bench/train_bench.txt
scripts/train_bench.sh --no-build | tee "$tout"
/usr/bin/python3 - "$tout" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- train-bench:start -->\n.*?<!-- train-bench:end -->", text, re.S)
if not m:
    sys.exit("train_bench.sh printed no train-bench block")
page = "docs/perf/training.md"
doc = open(page).read()
pat = re.compile(r"<!-- train-bench:start -->\n.*?<!-- train-bench:end -->", re.S)
if not pat.search(doc):
    sys.exit(f"{page} has no <!-- train-bench:start --> / <!-- train-bench:end --> markers")
open(page, "w").write(pat.sub(lambda _: m.group(0), doc))
print(f"{page}: training benchmark updated")
PY

# Imported models and loops against PyTorch (2 threads each; printed, and
# kept in build/bench/models_bench.txt): torchvision's ResNet-18,
# MobileNetV2 and SqueezeNet 1.1 inference at batch 1 and ResNet-18 and
# MobileNetV2 at batch 32 (PyTorch time / varq time in alternated rounds,
# and conv2d's share of varq's op time), the digits CNN fine-tuned from
# ONNX (steps/s; on im2col, as in the onnx_cnn_losses test, so that its
# loss check means what the test checks: examples/meson.build), and the RNN
# written with a while loop (steps/s).
mout=build/bench/models_bench.txt
{
  /usr/bin/python3 scripts/torchvision_check.py --varq build/tools/varq --bench 10 --rounds 5
  /usr/bin/python3 scripts/torchvision_check.py --varq build/tools/varq --batch 32 --bench 3 --rounds 3 \
    --models resnet18,mobilenet_v2
  VARQ_CONV_WINOGRAD=0 /usr/bin/python3 scripts/cnn_torch.py --bin build/examples/onnx_cnn_digits
  /usr/bin/python3 bench/rnn_torch.py --bin build/bench/rnn_bench --steps 500 --reps 5 \
    --warmup 100
} 2>&1 | grep -v Warning | tee "$mout"
