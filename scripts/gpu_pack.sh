#!/usr/bin/env bash
# Packs a CUDA build made on this machine for a GPU machine that has the
# CUDA driver and toolkit but not varq's other build dependencies (meson's
# build tree, OpenBLAS, protobuf-c, Criterion...): the binaries that
# scripts/gpu_check.sh runs, the digits data, ONNX's generated node tests,
# and every shared library they load except glibc's and CUDA's own (those
# come from the GPU machine, /usr/local/cuda/lib64). One xz archive, so
# the copy stays small (the binaries share most of their bytes).
#
# Usage: scripts/gpu_pack.sh BUILD_DIR OUT.tar.xz
# On the GPU machine:
#   tar xf OUT.tar.xz            (recreates BUILD_DIR/ and BUILD_DIR/lib/)
#   LD_LIBRARY_PATH=BUILD_DIR/lib scripts/gpu_check.sh BUILD_DIR --prebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:?usage: scripts/gpu_pack.sh BUILD_DIR OUT.tar.xz}
out=${2:?usage: scripts/gpu_pack.sh BUILD_DIR OUT.tar.xz}
bins=(tests/engine/test_stream tests/engine/test_engine_gpu tests/test_ops_gpu_kernels tests/test_exec_gpu
  tests/test_capture tests/test_train tests/exec_stress examples/mlp_digits
  bench/train_bench bench/gpu_bench bench/capture_bench tools/onnx_check tools/varq)
files=()
for f in "${bins[@]}"; do
  [ -x "$b/$f" ] || { echo "gpu_pack: $b/$f is not built" >&2; exit 1; }
  files+=("$b/$f")
done
[ -d "$b/examples/digits" ] && files+=("$b/examples/digits")
[ -f "$b/onnx-tests/.complete" ] && files+=("$b/onnx-tests")
rm -rf "$b/lib"
mkdir -p "$b/lib"
# every library the binaries load, but the C library's and CUDA's
for f in "${bins[@]}"; do ldd "$b/$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libresolv)\.so|/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$b/lib/"; done
files+=("$b/lib")
tar cf - "${files[@]}" | xz -9e -T2 > "$out"
echo "gpu_pack: $out $(du -h "$out" | cut -f1) ($(ls "$b/lib" | wc -l) libraries)"
