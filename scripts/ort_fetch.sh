#!/usr/bin/env bash
# Installs ONNX Runtime (CPU), the peer that bench/models_vs_ort.py measures
# varq against, from npm's onnxruntime-node package into a cache folder
# outside the source tree, and prints where its libonnxruntime.so and its
# node module are. Benchmarks only: setup.sh and the test suite never call
# it, so that building and testing varq needs no network.
#
# usage: scripts/ort_fetch.sh [--quiet]
#   VARQ_PEERS_DIR  the cache folder (default ${XDG_CACHE_HOME:-~/.cache}/varq-peers)
#   ORT_VERSION     the onnxruntime-node version (default 1.30.0)
# Idempotent: a second run finds the package and installs nothing.
# Output, one "key=path" a line (what models_vs_ort.py reads):
#   ort_lib=.../libonnxruntime.so.N
#   ort_node_module=.../node_modules/onnxruntime-node
set -euo pipefail

version=${ORT_VERSION:-1.30.0}
root=${VARQ_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/varq-peers}
dir="$root/onnxruntime-node-$version"
mod="$dir/node_modules/onnxruntime-node"
quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1

command -v npm >/dev/null || { echo "ort_fetch.sh: npm not found" >&2; exit 1; }

have=""
[ -f "$mod/package.json" ] && have=$(node -p "require('$mod/package.json').version" 2>/dev/null || true)
if [ "$have" != "$version" ]; then
  mkdir -p "$dir"
  # --ignore-scripts: the package's install script downloads CUDA builds
  # from elsewhere; the CPU library comes inside the npm tarball itself.
  [ -f "$dir/package.json" ] || echo '{"name":"varq-peers","private":true}' >"$dir/package.json"
  out=/dev/stdout
  [ $quiet -eq 1 ] && out=/dev/null
  (cd "$dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
    "onnxruntime-node@$version") >"$out" 2>&1 || {
    echo "ort_fetch.sh: npm install onnxruntime-node@$version failed" >&2
    exit 1
  }
fi

arch=$(uname -m)
case "$arch" in
  x86_64) narch=x64 ;;
  aarch64) narch=arm64 ;;
  *) narch=$arch ;;
esac
bindir="$mod/bin/napi-v6/linux/$narch"
lib=$(find "$bindir" -maxdepth 1 -name 'libonnxruntime.so*' 2>/dev/null | sort | tail -n 1)
if [ -z "$lib" ]; then
  lib=$(find "$mod" -name 'libonnxruntime.so*' ! -name '*providers*' 2>/dev/null | sort | tail -n 1)
fi
[ -n "$lib" ] || { echo "ort_fetch.sh: no libonnxruntime.so under $mod" >&2; exit 1; }
echo "ort_lib=$lib"
echo "ort_node_module=$mod"
