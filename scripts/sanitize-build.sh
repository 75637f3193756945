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
# numbers in the reports. A Debug build type keeps assert() on, in the fuzz targets too.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DDUET_SANITIZE=ON \
  -DDUET_CUDA=OFF "${fuzz[@]}" ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target "$@"
