#!/usr/bin/env bash
# Checks that the C lines written since .clang-format last changed are laid
# out as it says (git clang-format over the lines that differ from that
# commit, committed or not). Code older than the style file is left as it
# is: .clang-format describes the house style closely but not exactly, and
# a tree-wide reformat would bury the history; each line gets the style
# when it is next touched. VARQ_FORMAT_BASE=<commit> compares with another
# commit. Prints the diff to apply and fails when a changed line differs;
# `scripts/format_check.sh --fix` applies it instead.
set -euo pipefail
cd "$(dirname "$0")/.."

cf=$(command -v git-clang-format-14 || command -v git-clang-format || true)
bin=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ] || [ -z "$bin" ]; then
  echo "format: clang-format and git-clang-format not found (scripts/setup.sh installs them)" >&2
  exit 1
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "format: not a git checkout; skipped"
  exit 0
fi
base=${VARQ_FORMAT_BASE:-$(git log -1 --format=%H -- .clang-format)}
if [ -z "$base" ]; then
  echo "format: .clang-format was never committed; skipped"
  exit 0
fi

if [ "${1:-}" = --fix ]; then
  exec "$cf" --binary "$bin" --extensions c,h "$base"
fi
out=$("$cf" --binary "$bin" --diff --extensions c,h "$base" 2>&1)
case "$out" in
  "" | "no modified files to format" | "clang-format did not modify any files")
    echo "format: the C lines changed since ${base:0:12} follow .clang-format"
    ;;
  *)
    printf '%s\n' "$out"
    echo "format: the lines above differ from .clang-format; scripts/format_check.sh --fix applies the diff" >&2
    exit 1
    ;;
esac
