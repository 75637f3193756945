#!/usr/bin/env bash
# Installs what duet needs to build and test on Debian 12, then configures and builds it.
# Usage: scripts/setup.sh [--no-build] [--build-packages | --test-packages] [build-dir]   (default: build)
#   --no-build: the packages only; --build-packages: only what the builds need (the release build and the sanitizer
#   build); --test-packages: only what the tests and checks need besides, no build (scripts/test.sh installs these
#   while the build runs).
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
build_packages=(build-essential cmake ninja-build pkg-config git curl ca-certificates
  nlohmann-json3-dev libcpp-httplib-dev libboost1.81-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev liblapacke-dev libopenblas-dev python3 clang libclang-rt-14-dev llvm-14
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev)
test_packages=(python3-jinja2 nodejs npm clang-format chromium)
# libpng-dev, libjpeg62-turbo-dev, libwebp-dev, libgif-dev: image decoding (src/image). (Only to make the committed
# tests/image/fixtures again: apt-get install python3-pil python3-numpy, then tests/image/make_image_fixtures.py.)
# clang-format: scripts/check-format.sh; chromium: the browser tests (headless, driven by puppeteer-core); clang: the
# C++ compiler of the builds made here (below), and with its sanitizer and libFuzzer runtimes the sanitizer build
# (scripts/sanitize.sh, scripts/fuzz.sh); llvm-14: its llvm-symbolizer, which names the functions and lines in a
# sanitizer's report.
packages=("${build_packages[@]}" "${test_packages[@]}")
while [[ ${1:-} == --* ]]; do
  case $1 in
    --no-build) build=0 ;;
    --build-packages) packages=("${build_packages[@]}") ;;
    --test-packages) build=0 packages=("${test_packages[@]}") ;;
    *) echo "setup: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
build_dir=${1:-build}

# Recommended packages are not installed (--no-install-recommends): on a fresh Debian 12 they were 213 of 854 packages
# (desktop, printing, perl and llvm-dev pieces that nothing here uses; docs/benchmarks.md, "Build time").
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A node and npm installed outside Debian's packages (nodesource, nvm) do as well.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[[ $build == 1 ]] || exit 0
jobs=$(nproc)
# A build directory made here compiles the libraries in unity batches (DUET_UNITY_LIBS): a fresh build's cheapest, and
# what CI builds. An existing one keeps what it was configured with (-DDUET_UNITY_LIBS=OFF for file-by-file rebuilds
# while editing the libraries, e.g. with ccache; CMakeLists.txt says why it is off by default).
# It compiles duet's C++ with clang++: the same build took 27% less CPU time than with g++ (533 against 736 CPU s on the
# 2-core dev machine, docs/benchmarks.md, "Build time", thirteenth pass), the same tokens and the same CPU speed. nvcc's
# host compiler stays g++. (-DCMAKE_CXX_COMPILER=g++ in DUET_CMAKE_ARGS, or a build folder of your own, for g++: both
# compile without a warning.)
fresh=()
[[ -f $build_dir/CMakeCache.txt ]] || fresh=(-DDUET_UNITY_LIBS=ON -DCMAKE_CXX_COMPILER=clang++)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${fresh[@]}" ${DUET_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
