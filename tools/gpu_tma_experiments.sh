#!/usr/bin/env bash
# On the GPU machine: the TMA engine's prepared experiments (docs/benchmarks.md, 34th round) in one call, most telling
# first, each stage skipped once the budget would not cover it. Needs a pack of a build with the benchmarks
# (tools/pack_for_device.sh; PACK_ONLY="duet cuda_tests cuda_cublaslt_loader_test bench_skinny_gemm bench_gdn_delta"),
# unpacked into device/ or carried as .devpack/device.tar.xz (unpacked here when device/ is missing).
#   0. the GEMM GPU tests as they are (production's ring);
#   1. bench_skinny_gemm --tma-tiled: the weights as stored against the same weights by 16 KB tile, and in blocks of
#      64 rows (bits checked);
#   2. bench_skinny_gemm --tma-slices with DUET_BENCH_RINGS=short: rings 4x1, 2x2, 4x2 by slice count (bits checked);
#   3. the GEMM GPU tests with DUET_SKINNY_TMA_RING=2x2 (the same bits expected);
#   4. duet run A/B at 64 streams (2 rounds) and 1 stream: production, rings 2x2 and 4x2, and 2 slices for the GDN input
#      projection and attention's q | k | v (DUET_SKINNY_TMA_SLICES; their own bits);
#   5. bench_gdn_delta 20 decode under the default, clusters and dense delta-rule forms.
#   usage: tools/gpu_tma_experiments.sh OUT [WORK=/tmp/9b] [BUDGET_S=540]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; budget=${3:-540}
start=$(date +%s)
mkdir -p "$out"
left() { echo $(( budget - ($(date +%s) - start) )); }
if [[ ! -x device/bin/duet ]]; then
  [[ -f .devpack/device.tar.xz ]] || { echo "no device/ and no .devpack/device.tar.xz: pack first" >&2; exit 1; }
  tar -xJf .devpack/device.tar.xz
fi
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DUET_TESTS_DIR_OVERRIDE="$PWD/tests"
bench_gemm=$(find device/tests -name bench_skinny_gemm -type f | head -1)
bench_delta=$(find device/tests -name bench_gdn_delta -type f | head -1)
cuda_tests=$(find device/tests -name cuda_tests -type f | head -1)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader

echo "== 0. the GEMM tests on production's ring (this commit's first GPU run of the engine)"
timeout 60 "$cuda_tests" --gtest_brief=1 --gtest_filter='SkinnyGemm*:SkinnyTma*' 2>&1 | tail -2
echo "== 1. tiled weights"
timeout 90 "$bench_gemm" --tma-tiled > "$out/tiled.txt" 2>&1 || echo "(tiled: exit $?)"
grep -v "^$" "$out/tiled.txt"
echo "== 2. rings by slice count (at $(( $(date +%s) - start )) s)"
(( $(left) > 150 )) && { DUET_BENCH_RINGS=short timeout 120 "$bench_gemm" --tma-slices > "$out/rings.txt" 2>&1 ||
  echo "(rings: exit $?)"; grep -E "  (1|64) |check|differ" "$out/rings.txt" | cut -c1-100; }
echo "== 3. GEMM tests on ring 2x2 (at $(( $(date +%s) - start )) s)"
(( $(left) > 120 )) && DUET_SKINNY_TMA_RING=2x2 timeout 60 "$cuda_tests" --gtest_brief=1 \
  --gtest_filter='SkinnyGemm*' 2>&1 | tail -2
echo "== 4. duet run (at $(( $(date +%s) - start )) s)"
if (( $(left) > 150 )) && [[ ! -f $work/model/config.json ]]; then
  python3 tools/make_9b_references.py --out "$work" --checkpoint-only > "$out/make9b.log" 2>&1 || tail -5 "$out/make9b.log"
fi
slices="DUET_SKINNY_TMA_SLICES=12352x4096:2,10240x4096:2"
(( $(left) > 140 )) && tools/gpu_launch_ab.sh "$work" 64 2 - DUET_SKINNY_TMA_RING=2x2 DUET_SKINNY_TMA_RING=4x2 "$slices"
(( $(left) > 60 )) && tools/gpu_launch_ab.sh "$work" 1 1 - DUET_SKINNY_TMA_RING=2x2 DUET_SKINNY_TMA_RING=4x2 "$slices"
echo "== 5. the delta rule's decode forms (at $(( $(date +%s) - start )) s)"
for form in "" clusters dense; do
  (( $(left) > 30 )) || break
  echo "-- DUET_DELTA_DECODE=${form:-default}"
  DUET_DELTA_DECODE=$form timeout 30 "$bench_delta" 20 decode 2>&1 | tail -6
done
echo "done at $(( $(date +%s) - start )) s"
