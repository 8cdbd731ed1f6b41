#!/usr/bin/env bash
# The real-GPU checks, for a machine with an NVIDIA GPU (CI has none: there
# every GPU path runs on the emulated backend inside scripts/test.sh).
# Builds varq with CUDA, runs the GPU suites on the CUDA backend (every op's
# CUDA kernel against its CPU kernel, the engine's GPU suite, programs and
# training on the GPU against the CPU executor, the executor stress), then
# the GPU benchmarks: per-op overhead against raw launches (gpu_bench) and
# training steps per second on the GPU (train_bench --gpu 0).
#
# Usage: scripts/gpu_check.sh [BUILD_DIR] [--prebuilt] [--sanitize]
#   BUILD_DIR   default build-gpu
#   --prebuilt  run what BUILD_DIR holds without meson (a build made on
#               another machine and packed by scripts/gpu_pack.sh)
#   --sanitize  also run the GPU suites under compute-sanitizer (memcheck,
#               racecheck, synccheck)
# Exit status: 0 when every check passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
b=build-gpu
prebuilt=0
sanitize=0
for a in "$@"; do
    case $a in
    --prebuilt) prebuilt=1 ;;
    --sanitize) sanitize=1 ;;
    --*) echo "usage: scripts/gpu_check.sh [BUILD_DIR] [--prebuilt] [--sanitize]" >&2; exit 2 ;;
    *) b=$a ;;
    esac
done
if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L
fi
if [ "$prebuilt" -eq 0 ]; then
    if [ ! -f "$b/build.ninja" ]; then
        meson setup "$b" -Dbuildtype=release -Dcuda=enabled || exit 1
    fi
    meson compile -C "$b" || exit 1
fi

export VARQ_GPU_BACKEND=cuda
"$b/bench/gpu_bench" --backend cuda --tiny >/dev/null 2>&1
if [ $? -eq 77 ]; then
    "$b/bench/gpu_bench" --backend cuda --tiny 2>&1 | tail -1
    echo "== no usable GPU: nothing checked"
    exit 1
fi
status=0
# each check is stopped after GPU_CHECK_TIMEOUT seconds (default 600), so a
# hang costs one check, not the machine's lease
step() {
    echo "== $*"
    local t0=$SECONDS
    timeout "${GPU_CHECK_TIMEOUT:-600}" "$@" || { echo "== FAILED (status $?): $*"; status=1; }
    echo "== $((SECONDS - t0)) s"
}
for t in stream engine_gpu ops_gpu_kernels exec_gpu capture train; do
    step "$b/tests/test_$t"
done
step "$b/tests/exec_stress" 2000 --gpu
if [ -f "$b/examples/digits/train_x.npy" ] ||
    /usr/bin/python3 scripts/digits_to_npy.py "$b/examples/digits" >/dev/null 2>&1; then
    step "$b/examples/mlp_digits" "$b/examples/digits" --gpu 0
    # with the MLP's per-op host times on the GPU (the profiler's trace)
    step "$b/bench/train_bench" --gpu 0 --digits "$b/examples/digits" --reps 3 \
        --kernel-share "$b/gpu-train-trace.json"
    # the PyTorch eager peer on the same GPU (skipped without torch + CUDA)
    if /usr/bin/python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        step /usr/bin/python3 bench/train_torch.py --device cuda --digits "$b/examples/digits" \
            --steps-seed 2000 --steps-mlp 2000 --reps 3 --warmup 200
    fi
else
    echo "== no digits data (scikit-learn missing): train_bench on synthetic batches"
    step "$b/bench/train_bench" --gpu 0 --digits /nonexistent --reps 3
fi
# ONNX's backend node tests on the GPU executor (every case that passes on
# the CPU; skipped where python3-onnx is missing: exit 77)
if [ -x "$b/tools/onnx_check" ]; then
    echo "== scripts/onnx_conformance.sh $b --gpu 0 --check"
    rc=0
    scripts/onnx_conformance.sh "$b" --gpu 0 --check | tail -1 || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || { echo "== FAILED: onnx conformance on the GPU"; status=1; }
fi
# torchvision's ResNet-18, MobileNetV2 and SqueezeNet exported by PyTorch
# and run on the GPU executor, against PyTorch (skipped without
# python3-torchvision)
if [ -x "$b/tools/varq" ] && /usr/bin/python3 -c 'import torchvision, onnx' 2>/dev/null; then
    step /usr/bin/python3 scripts/torchvision_check.py --varq "$b/tools/varq" --gpu 0
fi
step "$b/bench/gpu_bench" --backend cuda --reps 5
# compute-sanitizer over the suites (Criterion forks a process per test:
# --target-processes all)
if [ "$sanitize" -eq 1 ]; then
    if command -v compute-sanitizer >/dev/null; then
        cs=(compute-sanitizer --target-processes all --error-exitcode 1 --print-limit 20)
        for t in stream engine_gpu exec_gpu ops_gpu_kernels capture train; do
            step "${cs[@]}" --tool memcheck "$b/tests/test_$t"
        done
        # shared memory and barriers: the kernels' reductions and the engine's
        for tool in racecheck synccheck; do
            for t in engine_gpu ops_gpu_kernels exec_gpu; do
                step "${cs[@]}" --tool "$tool" "$b/tests/test_$t"
            done
        done
    else
        echo "== compute-sanitizer not found: sanitizer checks not run"; status=1
    fi
fi
if [ "$status" -eq 0 ]; then
    echo "== all GPU checks passed"
else
    echo "== some GPU checks FAILED"
fi
exit "$status"
