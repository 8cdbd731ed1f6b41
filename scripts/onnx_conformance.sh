#!/usr/bin/env bash
# ONNX conformance: generates ONNX's own backend node test cases (922 with
# Debian's python3-onnx 1.12) into BUILD/onnx-tests (once; never into the
# tree), runs every case through varq (BUILD/tools/onnx_check: import, run,
# compare with ONNX's tolerance) and prints pass / fail / unsupported per
# op and the totals (scripts/onnx_summary.py).
#
# usage: scripts/onnx_conformance.sh [BUILD] [--gpu ID] [--check] [--markdown FILE]
#        scripts/onnx_conformance.sh [BUILD] --fuzz N
#   BUILD       the meson build directory (default build)
#   --gpu ID    run every case on the GPU executor (device ID: the CUDA
#               backend, or the emulated one with VARQ_GPU_BACKEND=emulated,
#               as the meson test onnx_conformance_gpu runs it)
#   --check     exit 1 when a case fails, or a case of an op varq
#               translates is unsupported because of that op (the meson
#               test onnx_conformance runs this)
#   --markdown  also write the table of supported ops to FILE (the one in
#               docs/onnx-conformance.md)
#   --fuzz N    instead: import N mutated copies of the cases' models and
#               prepare and run those that import (onnx_check --fuzz; the
#               meson test onnx_fuzz, under ASan in that build)
# Exit 77 (skipped) when python3-onnx is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ $# -gt 0 ] && [[ $1 != --* ]]; then build=$1; shift; fi
cases=$build/onnx-tests
# one generation at a time (the meson tests may start together)
exec 9>"$build/onnx-tests.lock"
flock 9
if [ ! -f "$cases/.complete" ]; then
  rm -rf "$cases"
  status=0
  /usr/bin/python3 scripts/onnx_gen_tests.py "$cases" >/dev/null 2>&1 || status=$?
  if [ $status -eq 77 ] || ! /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
    echo "onnx_conformance: skipped: python3-onnx is not installed"; exit 77
  fi
  [ $status -eq 0 ] || { echo "onnx_conformance: generating the cases failed"; exit 1; }
  touch "$cases/.complete" "$cases/.fixed-2"
fi
# cases generated before onnx_gen_tests.py fixed some of them
# (.fixed-2: the bfloat16 Cast data fixed too)
if [ ! -f "$cases/.fixed-2" ]; then
  /usr/bin/python3 scripts/onnx_gen_tests.py --fix "$cases" >/dev/null
  touch "$cases/.fixed-2"
fi
flock -u 9
gpu=()
suffix=
if [ "${1:-}" = --gpu ]; then
  gpu=(--gpu "${2:?--gpu needs a device id}")
  suffix=-gpu$2
  shift 2
fi
if [ "${1:-}" = --fuzz ]; then
  exec "$build/tools/onnx_check" --fuzz "${2:?--fuzz needs a count}" "$cases"/node/*/
fi
results=$(mktemp "$build/onnx-results.XXXXXX")
trap 'rm -f "$results"' EXIT
"$build/tools/varq" onnx-ops > "$build/onnx-supported$suffix.txt"
"$build/tools/onnx_check" "${gpu[@]}" "$cases"/node/*/ > "$results"
cp "$results" "$build/onnx-results$suffix.txt"
/usr/bin/python3 scripts/onnx_summary.py "$build/onnx-results$suffix.txt" "$cases/node" \
  "$build/onnx-supported$suffix.txt" "$@"
