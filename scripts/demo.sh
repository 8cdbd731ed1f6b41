#!/usr/bin/env bash
# The main demo: converts scikit-learn's digits to .npy (once), trains the
# 64-128-10 MLP of examples/mlp_digits.c through varq's executor, printing
# loss and held-out accuracy per epoch, and writes a Chrome trace of one
# training step to build/mlp_digits_step.json. Run scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."

ninja -C build >/dev/null
if [ ! -f build/digits/test_y.npy ]; then
  /usr/bin/python3 scripts/digits_to_npy.py build/digits
fi
build/examples/mlp_digits build/digits --epochs 20 --trace build/mlp_digits_step.json
