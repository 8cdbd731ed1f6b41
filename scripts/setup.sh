#!/usr/bin/env bash
# Installs varq's dependencies from Debian's packages (idempotent) and
# configures and builds build/. Run from anywhere; works on a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(
  build-essential meson ninja-build pkg-config clang clang-format
  libck-dev libxxhash-dev libprotobuf-c-dev protobuf-c-compiler
  libcriterion-dev libopenblas-dev libstarpu-dev libomp-dev
  python3-numpy python3-torch python3-sklearn libtorch-dev
  libonnx-dev python3-onnx python3-torchvision
  spin valgrind bc doxygen
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ -f build/build.ninja ]; then
  meson setup --reconfigure build >/dev/null
else
  rm -rf build   # a half-made tree from an interrupted setup
  meson setup build --buildtype=release >/dev/null
fi
ninja -C build
