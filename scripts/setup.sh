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
  python3-dev python3-pytest
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

# The Python package (python/): `import varq` for Debian's /usr/bin/python3
# (the interpreter that sees python3-numpy, -torch and -onnx) from this
# build, through a .pth file in the user's site-packages naming
# build/python. Why a .pth and not pip: Debian 12's pip refuses to install
# into the system's Python (PEP 668, "externally-managed-environment"),
# and a --user install would need --break-system-packages and a copy
# that goes stale at every rebuild; a .pth file is plain site machinery
# (no registry, no root, no build isolation), and every later
# `ninja -C build` is what the import sees. Done only when the build made
# the package (python3-dev found); a .pth left by another checkout is
# replaced.
if [ -d build/python/varq ]; then
  user_site=$(/usr/bin/python3 -m site --user-site)
  mkdir -p "$user_site"
  echo "$PWD/build/python" >"$user_site/varq-build.pth"
  /usr/bin/python3 -c 'import varq; print("import varq:", varq.__version__, "from", varq.__file__)'
fi
