#!/usr/bin/env bash
# On the GPU machine: the 42nd round's prepared switches, each of which keeps every bit (issue 16; docs/benchmarks.md,
# 42nd round), checked and timed in one call on a pack of them (tools/device_pack_env.sh) and the 9B-shaped checkpoint
# of tools/make_9b_references.py (made in WORK when missing, about 40 s, beside the first stages):
#   1. their bits tests: SkinnyGemmTma.TheDeepRingKeepsEveryBit and AttentionKernels.QueriesSplitOverBlocksGiveTheSameRows;
#   2. bench_skinny_gemm --tma-blocks: every shape at 1..64 rows in 128-row blocks, 64-row blocks and 64-row blocks on a
#      ring of 6 stages (its bit checks must report 0 failed), beside a read kernel's rate on the same bytes;
#   3. `duet run` decode (tools/gpu_launch_ab.sh, ROUNDS rounds, alternating; every setting's tokens must be the
#      default's): DUET_SKINNY_TMA_DEEP=1 at 64 streams (with and without the GEMMs as dependents) and 48; DUET_ATTN_QUERY_SPLIT_ROWS=4 at 1 and 4 streams after a
#      1K prompt and at one stream after a 16K prompt; DUET_CUDA_EARLY_LOADS=1 at one stream;
# while BUDGET_S lasts, each stage skipped once it would not fit. Every stage writes its lines as it goes, to stdout
# and OUT/log (never through a pipe that holds them until the end: 41st round).
#   usage: tools/gpu_prepared_ab.sh OUT [WORK=/tmp/9b] [ROUNDS=2] [BUDGET_S=540]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; rounds=${3:-2}; budget=${4:-540}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
fits() {  # fits SECONDS: whether a stage of about that long ends inside the budget
  (( $(elapsed) + $1 <= budget )) || { echo "(skipped: about $1 s, $(( budget - $(elapsed) )) s left)"; return 1; }
}
source tools/device_pack_env.sh
start_checkpoint "$work" "$out"

echo "== 1. bits tests"
run_gpu_test 'SkinnyGemmTma.TheDeepRingKeepsEveryBit' "$out/deep-test.txt" 120
run_gpu_test '*QueriesSplitOverBlocksGiveTheSameRows*' "$out/split-test.txt" 180
echo "done at $(elapsed) s"

echo "== 2. bench_skinny_gemm --tma-blocks"
if fits 150; then
  timeout 150 device/tests/cuda/bench_skinny_gemm --tma-blocks > "$out/tma-blocks.txt" 2>&1
  cat "$out/tma-blocks.txt"
fi
await_checkpoint "$work" "$out"
echo "done at $(elapsed) s"

echo "== 3. duet run"
# At 64 rows the GEMMs launch in plain stream order (dependent launch lost 1.9% there in the 27th round, before the
# TMA engine asked for its first weights before the wait): the deep ring alone, the GEMMs as dependents alone, both.
fits 150 && tools/gpu_launch_ab.sh "$work" 64 "$rounds" - DUET_SKINNY_TMA_DEEP=1 DUET_CUDA_PDL_FLIP=skinny \
  "DUET_SKINNY_TMA_DEEP=1 DUET_CUDA_PDL_FLIP=skinny"
fits 90 && PROMPT_LEN=16384 tools/gpu_launch_ab.sh "$work" 1 "$rounds" - DUET_ATTN_QUERY_SPLIT_ROWS=4
fits 60 && tools/gpu_launch_ab.sh "$work" 1 "$rounds" - DUET_ATTN_QUERY_SPLIT_ROWS=4 DUET_CUDA_EARLY_LOADS=1
fits 60 && tools/gpu_launch_ab.sh "$work" 4 "$rounds" - DUET_ATTN_QUERY_SPLIT_ROWS=4
fits 90 && tools/gpu_launch_ab.sh "$work" 48 "$rounds" - DUET_SKINNY_TMA_DEEP=1
echo "done at $(elapsed) s"
