#!/usr/bin/env bash
# Builds and runs the whole test suite three times: a normal build (build/,
# gcc), an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/,
# clang, with the libFuzzer targets) and a ThreadSanitizer build
# (build-tsan/), each with `meson test`; in the normal
# build, the numeric suites (ops, onnx, train, graph) run again at every
# VARQ_ISA level below the CPU's; the engine builds and passes alone
# (build-engine/), and the fuzzers run a fixed set of inputs. Any failing
# test or sanitizer report fails the script. Between them it checks the
# public API against ../shared/checks/api_shape.c and builds the random
# serial-equivalence program outside the tree against varq.pc, and
# model-checks the var queue with spin (scripts/spin_check.sh), and checks
# the layout of the C lines changed since .clang-format (format_check.sh)
# and the documentation ("== docs").
# The sanitizer builds are configured without CUDA (-Dcuda=disabled): on a
# machine without a GPU the CUDA backend's code cannot run, nvcc's objects
# are not instrumented anyway, and compiling them twice more cost about two
# minutes of the suite; so the normal build is the one with CUDA (where
# nvcc is found), and the two sanitizer builds check the build without it.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# Each section's heading, with the seconds since the start: where the
# suite's time goes, in every CI log.
section() { echo "== $* [$(( $(date +%s) - start )) s]"; }

configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

suite() {
  local name=$1 dir=$2; shift 2
  section "$name build ($dir)"
  configure "$dir" "$@"
  ninja -C "$dir"
  section "$name tests ($dir)"
  meson test -C "$dir" --print-errorlogs
}

suite normal build

# The numeric suites again at each instruction-set level below the CPU's
# (VARQ_ISA caps varq's own kernels; OPENBLAS_CORETYPE picks OpenBLAS's for
# a CPU of that level), so that a machine with AVX-512 also tests the AVX2
# and portable paths that a machine without it takes.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
levels=()
if has avx512f && has avx2 && has fma; then
  levels+=("avx2 Haswell")
fi
if has avx2 && has fma; then
  levels+=("portable $(has avx && echo Sandybridge)")
fi
for level in "${levels[@]}"; do
  read -r isa core <<<"$level"
  section "the numeric suites at VARQ_ISA=$isa${core:+ (OpenBLAS: $core)}"
  env VARQ_ISA="$isa" ${core:+OPENBLAS_CORETYPE=$core} meson test -C build --no-rebuild --print-errorlogs \
    --suite ops --suite onnx --suite train --suite graph
done

section "public API shape (docs/design/engine.md, \"The public API\")"
if [ -f ../shared/checks/api_shape.c ]; then
  cc -std=c11 -fsyntax-only -Werror -Iinclude ../shared/checks/api_shape.c
  echo "api_shape.c compiles"
else
  echo "../shared/checks/api_shape.c not found: skipped"
fi

section "a program outside the tree, built against varq.pc"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cp tests/engine_stress.c tests/workload.c tests/workload.h "$out/"
flags=$(PKG_CONFIG_PATH="$PWD/build/meson-uninstalled" pkg-config --cflags --libs varq)
(cd "$out" && cc -std=c11 -Wall -Wextra -Werror -O2 -pthread engine_stress.c workload.c \
   -o engine_stress $flags -Wl,-rpath,"$OLDPWD/build")
"$out/engine_stress" 50000

# The engine alone (meson_options.txt: engine_only): its library and
# tests configure, build and pass where pkg-config can find every package
# but BLAS, protobuf-c, xxHash and MPI (a search path of links to the
# other .pc files), and no test program loads one.
section "the engine alone, without BLAS, protobuf-c or xxHash (build-engine)"
mkdir "$out/pc"
for pcdir in $(pkg-config --variable pc_path pkg-config | tr ':' ' '); do
  for f in "$pcdir"/*.pc; do
    case $(basename "$f" .pc) in *blas* | *lapack* | libprotobuf-c | libxxhash | ompi* | mpi*) ;;
      *) [ -e "$f" ] && ln -sf "$f" "$out/pc/" ;; esac
  done
done
PKG_CONFIG_LIBDIR="$out/pc" configure build-engine -Dengine_only=true
ninja -C build-engine >/dev/null
if ! meson test -C build-engine --print-errorlogs >"$out/engine.log" 2>&1; then
  cat "$out/engine.log"
  exit 1
fi
grep -E '^(Ok|Fail|Timeout):' "$out/engine.log"
if { ldd build-engine/tests/engine/* 2>/dev/null || true; } | grep -E 'blas|protobuf|xxhash|mpi'; then
  echo "an engine test loads a library the engine should not need" >&2
  exit 1
fi

section "the layout of the C lines changed since .clang-format (scripts/format_check.sh)"
scripts/format_check.sh

# The documentation (scripts/check_docs.py): README.md's and docs/'s
# relative links and #anchors resolve, their ```c blocks compile against
# include/ (```c fragment blocks excepted); the generated pages
# docs/reference/*.md are what the built tool prints (scripts/gen_docs.sh);
# and the API reference builds with no Doxygen warning, so every public
# function, type and macro is documented (docs/meson.build).
section "docs"
python3 scripts/check_docs.py
scripts/gen_docs.sh --check build
if command -v doxygen >/dev/null; then
  ninja -C build docs
  echo "docs: the API reference builds without warnings (build/docs/api/html)"
else
  echo "doxygen not found (scripts/setup.sh installs it): the API reference was not built"
fi

section "the var queue, model-checked (spin)"
scripts/spin_check.sh

# The ASan + UBSan build is clang's, with the fuzzers (option fuzz) in it:
# one sanitizer build of the library instead of two, the suite compiled
# by clang as the normal build is by gcc. Without clang: gcc, no fuzzers.
# A build-asan made by another compiler is made anew.
asan_cc=gcc asan_opts=()
if command -v clang >/dev/null; then
  asan_cc=clang asan_opts=(-Dfuzz=true)
fi
if [ -f build-asan/meson-info/intro-compilers.json ] &&
    ! grep -q "\"$asan_cc\"" build-asan/meson-info/intro-compilers.json; then
  rm -rf build-asan
fi
CC=$asan_cc suite "AddressSanitizer + UndefinedBehaviorSanitizer ($asan_cc)" build-asan \
  -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled "${asan_opts[@]}"
suite ThreadSanitizer build-tsan -Db_sanitize=thread -Db_lundef=false -Dcuda=disabled

# The libFuzzer targets (tests/fuzz_*.c), built in build-asan (above),
# each for a fixed number of
# inputs from a fixed seed: the same inputs on every machine, so the suite
# passes or fails by the commit, not by luck (a timed run explores a
# different stretch each time and once failed CI on a defect no commit had
# touched). A crash, a sanitizer report, a leak or a hang (-timeout) fails
# the script, leaving the input as crash-*/leak-*/oom-*/timeout-* here.
# Exploring further is a separate, open-ended job: the same command with
# another -seed, a larger -runs or -max_total_time, and a kept corpus.
section "fuzzers (build-asan, clang with libFuzzer)"
if [ "$asan_cc" = clang ]; then
  corpus=$(mktemp -d)
  onnx_corpus=$(mktemp -d)
  trap 'rm -rf "$out" "$corpus" "$onnx_corpus"' EXIT
  build-asan/examples/newton_sqrt "$corpus/newton.pb" >/dev/null
  if ! VARQ_FUZZ_SEEDS="$corpus" build-asan/tests/fuzz_program -seed=1 -runs=200000 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 "$corpus" >"$out/fuzz_program.log" 2>&1; then
    tail -n 60 "$out/fuzz_program.log"
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$out/fuzz_program.log"
  # The ONNX importer (when built), seeded with ONNX's backend test models
  # (the normal suite's onnx_conformance generated them into
  # build/onnx-tests) and the models tests/test_onnx.c builds.
  if ninja -C build-asan -t query tests/fuzz_onnx >/dev/null 2>&1; then
    ninja -C build-asan tests/fuzz_onnx
    VARQ_ONNX_SEEDS="$onnx_corpus" build/tests/test_onnx >/dev/null 2>&1 || true
    if [ -d build/onnx-tests ]; then
      find build/onnx-tests -name model.onnx | while read -r m; do
        cp "$m" "$onnx_corpus/$(basename "$(dirname "$m")").onnx"
      done
    fi
    if ! build-asan/tests/fuzz_onnx -seed=1 -runs=100000 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$onnx_corpus" >"$out/fuzz_onnx.log" 2>&1; then
      tail -n 60 "$out/fuzz_onnx.log"
      exit 1
    fi
    grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$out/fuzz_onnx.log"
  fi
else
  echo "clang not found: skipped"
fi

echo "== all suites passed in $(( $(date +%s) - start )) s"
