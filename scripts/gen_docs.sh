#!/usr/bin/env bash
# Writes the generated reference pages from the built varq tool:
#   docs/reference/ops.md       `varq ops --markdown`
#   docs/reference/onnx-ops.md  `varq onnx-ops --markdown`
# With --check it writes nothing and fails, showing the difference, when a
# committed page is not what the tool prints: scripts/test.sh runs it so
# that the pages never fall behind the registry. Run it without --check
# after adding or changing an op, and commit the pages.
#
# Usage: scripts/gen_docs.sh [--check] [BUILD_DIR]   (BUILD_DIR: build)
# The tool must be built (ninja -C BUILD_DIR tools/varq). Plugins are not
# loaded (VARQ_PLUGINS is unset): the pages list varq's own ops. A build
# without the ONNX importer leaves onnx-ops.md as it is (and unchecked).
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
if [ "${1:-}" = --check ]; then
  check=true
  shift
fi
build=${1:-build}
varq=$build/tools/varq
if [ ! -x "$varq" ]; then
  echo "gen_docs: $varq not found: build it first (ninja -C $build tools/varq)" >&2
  exit 1
fi
unset VARQ_PLUGINS

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
page() {
  local name=$1; shift
  local want=docs/reference/$name
  if ! "$varq" "$@" --markdown >"$tmp/$name" 2>"$tmp/err"; then
    if [ "$1" = onnx-ops ] && grep -q 'no ONNX importer' "$tmp/err"; then
      if $check; then
        echo "gen_docs: $build has no ONNX importer: $want not checked"
      else
        echo "gen_docs: $build has no ONNX importer: $want left as it is"
      fi
      return
    fi
    cat "$tmp/err" >&2
    echo "gen_docs: varq $* --markdown failed" >&2
    status=1
    return
  fi
  if $check; then
    if ! diff -u "$want" "$tmp/$name" >"$tmp/diff" 2>&1; then
      head -n 40 "$tmp/diff"
      echo "gen_docs: $want is not what \`varq $* --markdown\` prints;" \
        "run scripts/gen_docs.sh $build and commit it" >&2
      status=1
    else
      echo "gen_docs: $want is current"
    fi
  else
    mkdir -p docs/reference
    cp "$tmp/$name" "$want"
    echo "gen_docs: wrote $want"
  fi
}
page ops.md ops
page onnx-ops.md onnx-ops
exit $status
