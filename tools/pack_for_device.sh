#!/usr/bin/env bash
# Packs what the GPU machine needs to run duet and its GPU tests into device/ (git-ignored), because that machine has
# no package manager: the duet binary, the CUDA test executables (cuda_*, same relative paths as under BUILD/tests)
# and the kernel benchmarks (bench_*),
# symbols stripped so the whole call stays under the device tool's 64 MiB, and every shared library they link
# except glibc's family and the CUDA driver/toolkit (the GPU machine has its own), plus device/run_gpu_tests.sh.
# It builds what it packs first, and names the commit in device/PACKED_FROM.
#   usage: tools/pack_for_device.sh [BUILD_DIR]   (default: build)
# The checkout alone is about 58.6 MB of the call's 64 MiB, so a pack of everything no longer fits beside it. With
# PACK_ONLY="NAME ..." only those executables go (e.g. "duet cuda_tests cuda_cublaslt_loader_test": 6.5 MB, the GPU
# suite and the exactness bench, session 40; kernel_trace names the CUPTI timeline library), and PACK_NO_BLAS=1 leaves out OpenBLAS / LAPACKE (only `duet adapter`
# and the RuntimeAdapter tests need them). OpenSSL and zlib are never packed: the GPU machine's Ubuntu 24.04 has both,
# ABI-compatible (seen working in session 40), and they were 1.9 MB of the compressed pack.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
out="$repo/device"

# Device time is short: refuse to pack a decode GEMM whose wgmma instructions ptxas serialized (tools/ptxas_report.sh,
# about 30 s; PACK_NO_PTXAS_CHECK=1 skips it, e.g. for a build without the CUDA backend's sources changed).
if [[ ${PACK_NO_PTXAS_CHECK:-0} != 1 ]]; then
  "$repo/tools/ptxas_report.sh" "$build" || { echo "pack_for_device: not packed (see above)" >&2; exit 1; }
fi

# A pack of a build older than its sources would measure other code than the receipts name: the packed targets are
# built first (nothing to do when current). What they were built from goes into device/PACKED_FROM, which
# tools/device_pack_env.sh prints on the GPU machine, so every call's output names its commit.
targets=${PACK_ONLY:-}  # none: every target
# kernel_trace is a target only where CUPTI was found (tests/cuda/CMakeLists.txt): asked for elsewhere, it is skipped.
[[ -f $build/tests/cuda/libkernel_trace.so ]] || targets=${targets//kernel_trace/}
nice ninja -C "$build" $targets > /dev/null || { echo "pack_for_device: the build ($targets) failed" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/tests" "$out/lib"
echo "$(git -C "$repo" describe --always --dirty) packed $(date -u +%FT%TZ)" > "$out/PACKED_FROM"
wanted() { [[ -z ${PACK_ONLY:-} || " $PACK_ONLY " == *" $1 "* ]]; }

# The duet binary: bin/duet when the build has one, else where src/cli puts it.
duet=""
for candidate in "$build/bin/duet" "$build/src/cli/duet"; do
  if [[ -x $candidate ]]; then duet=$candidate; break; fi
done
[[ -n $duet ]] || { echo "pack_for_device: no duet binary under $build" >&2; exit 1; }
binaries=()
if wanted duet; then
  cp "$duet" "$out/bin/duet"
  strip --strip-all "$out/bin/duet"
  binaries+=("$duet")
fi

# Test executables, keeping their paths relative to BUILD/tests (CMake's own probe binaries are skipped).
while IFS= read -r test; do
  rel=${test#"$build/tests/"}
  wanted "$(basename "$test")" || continue
  mkdir -p "$out/tests/$(dirname "$rel")"
  cp "$test" "$out/tests/$rel"
  strip --strip-all "$out/tests/$rel"
  binaries+=("$test")
done < <(find "$build/tests" -type f -executable \( -name 'cuda_*' -o -name 'bench_*' \) -not -path '*/CMakeFiles/*' | sort)

# The CUPTI kernel-timeline library (tests/cuda/kernel_trace.cc), loaded by the driver through CUDA_INJECTION64_PATH:
# into lib/, with libcupti beside it (the GPU machine's CUPTI is a Python wheel's, off the loader's path).
trace="$build/tests/cuda/libkernel_trace.so"
if wanted kernel_trace && [[ -f $trace ]]; then
  cp "$trace" "$out/lib/"
  strip --strip-all "$out/lib/libkernel_trace.so"
  binaries+=("$trace")
fi

# Their shared libraries, under the name the loader asks for (ldd's first column), symlinks resolved.
skip='^(libssl|libcrypto|libz|libc|libm|libpthread|libdl|librt|ld-linux.*|libgcc_s|libstdc\+\+|libcuda|libcublas.*|libcudart.*)\.so'
for binary in "${binaries[@]}"; do
  { ldd "$binary" || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" "$out/lib/$name"
done

# `duet adapter` (and the adapter tests, which extract their adapter with it) loads LAPACKE and OpenBLAS at run time
# (src/convert/linear_algebra.cc), so ldd does not see them: carry them and what they link, by the names dlopen asks.
for name in libopenblas.so.0 liblapacke.so.3; do
  [[ ${PACK_NO_BLAS:-0} == 1 ]] && break
  path=$(ldconfig -p | awk -v n="$name" '$1 == n && /x86-64/ && !found {print $NF; found = 1}')  # reads all: no SIGPIPE
  [[ -n $path ]] || { echo "pack_for_device: $name not found (apt-get install libopenblas0 liblapacke)" >&2; exit 1; }
  cp -L "$path" "$out/lib/$name"
  { ldd "$path" || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r dep deppath; do
    [[ $dep =~ $skip || -e $out/lib/$dep ]] || cp -L "$deppath" "$out/lib/$dep"
  done
done

# The suite's runner (DUET_GPU_JOBS, DUET_GPU_FIRST, DUET_GPU_SUITES, DUET_GPU_TEST_TIMES: its header says).
cp "$repo/tools/run_gpu_tests.sh" "$out/run_gpu_tests.sh"
chmod +x "$out/run_gpu_tests.sh"

# The device tool carries at most 64 MiB with the whole checkout: send the pack compressed (one xz stream with a large
# dictionary: the test binaries share most of their code), unpacked there with
#   tar -xJf .devpack/device.tar.xz
mkdir -p "$repo/.devpack"
tar -C "$repo" -cf - device | xz -9 -T1 > "$repo/.devpack/device.tar.xz"
echo "pack_for_device: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1) in $out;" \
  "$(du -sh "$repo/.devpack/device.tar.xz" | cut -f1) in .devpack/device.tar.xz"
