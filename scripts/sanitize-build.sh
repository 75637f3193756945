#!/usr/bin/env bash
# Configures and builds targets of the sanitizer build (ASan + UBSan, CPU only), the one build that scripts/sanitize.sh
# (the unit tests) and scripts/fuzz.sh (the libFuzzer targets) share, so the sources both read are compiled once
# (docs/benchmarks.md, "Build time"). With clang++ (scripts/setup.sh installs it) the build is clang's with the fuzz
# targets (DUET_FUZZ); without it, g++'s without them.
#   usage: scripts/sanitize-build.sh BUILD_DIR TARGET...
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$1
shift
fuzz=(-DCMAKE_CXX_COMPILER=g++ -DDUET_FUZZ=OFF)
command -v clang++ >/dev/null && fuzz=(-DCMAKE_CXX_COMPILER=clang++ -DDUET_FUZZ=ON)
# -O1: what the sanitizers' authors recommend, and far cheaper to compile than the release build's -O3; -g1: line
# numbers in the reports. A Debug build type keeps assert() on, in the fuzz targets too. The libraries' files compile
# in unity batches (CMAKE_UNITY_BUILD), one batch a target: parsing the same headers again in each file was most of this
# build's CPU time (docs/benchmarks.md, "Build time", fifth pass; batches of 8 files took 489 CPU s, one a target 457,
# thirteenth pass); the code each test runs is the same.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DDUET_SANITIZE=ON \
  -DDUET_CUDA=OFF -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0 "${fuzz[@]}" ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target "$@"
# AddressSanitizer checks the order of dynamic initialisation between files (sanitize.sh: check_initialization_order,
# strict_init_order), not inside one: a file with a global that has a dynamic initialiser stays out of the batches
# (SKIP_UNITY_BUILD_INCLUSION, as src/grammar/CMakeLists.txt does), and a batch that holds one fails the build here.
status=0
while IFS= read -r -d '' batch; do
  if nm "$batch" 2>/dev/null | grep -q _GLOBAL__sub_I_; then
    echo "sanitize-build: $batch has a global with a dynamic initialiser; give its file SKIP_UNITY_BUILD_INCLUSION" >&2
    status=1
  fi
done < <(find "$build_dir/src" -path '*/Unity/*.o' -print0)
exit $status
