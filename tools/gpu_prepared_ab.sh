#!/usr/bin/env bash
# On the GPU machine: the prepared switches, each of which keeps every bit (issue 16; docs/benchmarks.md, 42nd and 43rd
# rounds), checked and timed in one call on a pack of them (tools/device_pack_env.sh) and the 9B-shaped checkpoint
# of tools/make_9b_references.py (made in WORK when missing, about 40 s, beside the first stages):
#   1. their bits tests: SkinnyGemmTma.TheDeepRingKeepsEveryBit (and with SPLIT_AB=1
#      AttentionKernels.QueriesSplitOverBlocksGiveTheSameRows, 40 s; both passed in the 43rd round and are in the suite);
#   2. bench_skinny_gemm --tma-blocks (BENCH=1; the 43rd round's figures gave the deep ring's rule): every shape at
#      1..64 rows in 128-row blocks, 64-row blocks and 64-row blocks on a ring of 6 stages, beside a read kernel's rate
#      on the same bytes;
#   3. `duet run` decode (tools/gpu_launch_ab.sh, ROUNDS rounds, alternating; every setting's tokens must be the
#      default's): the deep ring's rule (the default since the 43rd round) against DUET_SKINNY_TMA_DEEP=0 at 16, 32 and
#      64 streams (DEEP_AB=1; timed in the 43rd round);
#   4. exactness (tools/gpu_bench.sh: `duet serve` + `duet bench --alone --serial` at 1,
#      4, 16 and 64 streams, greedy, seeded and penalized; 0 unequal, 0 failed; EXACT=0 skips it);
#   5. structured-output rows in steps launched ahead (DUET_LOOKAHEAD_MASKED=1, 43rd round): its GPU test
#      (CudaMaskedSteps.*), exactness of schema-constrained requests with it on (`duet
#      bench --alone --serial --response-format`, 1 / 16 / 64 streams, greedy, seeded, penalized), and served decode
#      under a JSON schema, off against on (tools/gpu_served_ab.sh with BENCH_FORMAT);
#   6. `duet run` at one stream with DUET_CUDA_EARLY_LOADS=1 (38th round; never timed in the model), and with
#      SPLIT_AB=1 DUET_ATTN_QUERY_SPLIT_ROWS=4 after a 16K prompt (43rd round: +0.3%) and DUET_ATTN_QUERY_SPLIT_ROWS=16
#      at 16 streams (45th round: there the decode attention's 512 blocks read 1.6 TB/s, two waves of whole groups);
#   7. the bench with the four-slice shapes (out projections, MLP down) in two slices (DUET_SKINNY_TMA_SLICES);
#   8. the dense delta-rule kernel's ring of bulk copies (the default since the 44th round; DUET_DELTA_DENSE_BULK=0 the
#      rolling loads before it; BULK_AB=1): its bits test (GdnKernelsTest.DenseDecodeKernelGivesTheClusterFormsBits,
#      every form), bench_gdn_delta's decode cases under both (the same fingerprints), `duet run` at 64 and 32 streams;
#   9. the dense kernel's threshold (DENSE_AB=1; from 4 rows since the 45th round, where it was 32 before the ring of
#      bulk copies): bench_gdn_delta's 1 and 16-row cases under the clusters and the dense kernel, `duet run` at 1
#      stream (the dense kernel from one row, with early loads too) and at 16 streams (DUET_DELTA_DECODE=dense:32, the
#      clusters there, against the default);
#  10. the chunked walk's forms (WALK_AB=1): its outputs in tiles (the default since the 44th round;
#      DUET_DELTA_WALK_TILES=0 the other form) and its wide form (the default since the 45th; DUET_DELTA_WALK_WIDE=0 the
#      narrow form) and the wide form's split fold (DUET_DELTA_WALK_SPLIT=1, 45th round, not yet timed: the fold in 4 x 4
#      tiles on the block's upper half beside the outputs): their bits test (GdnKernelsTest.WalkFormsKeepEveryBit),
#      bench_gdn_delta's prefill cases under each (the same fingerprints), `duet run` prefill of 1K and 4K prompts, the
#      narrow form and the split fold against the default (tools/gpu_prefill_ab.sh); then the kernel timelines of a 1K
#      and a 4K prompt's prefill (PREFILL=LEN tools/gpu_timeline.sh, with a pack that has kernel_trace);
#  11. the 46th round's prefill changes (PREFILL_AB=1): the walk's tensor-core form for WY chunks (the default;
#      DUET_DELTA_WALK_MMA=0 the FMA form), the wide conv kernel (the default since the 48th round; DUET_CONV_WIDE=0
#      one channel a thread) and every sampled row's LM head on the skinny GEMM (DUET_SAMPLE_ROWS_PINNED=1 a prompt's
#      last row on the pinned one): their tests (GdnKernelsTest.TensorCoreWalk*, WideConvRows*), bench_gdn_delta's
#      prefill cases under both walks, `duet run` prefill of 1K and 4K prompts with each turned off against the
#      defaults (tools/gpu_prefill_ab.sh), then the 4K prompt's kernel timeline;
#  12. the dense decode kernel's earlier keys through its ring (KEYS_AB=1; the default since the 48th round,
#      DUET_DELTA_DENSE_KEYS=0 leaves them out; the same bits): its bits test (GdnKernelsTest.DenseDecodeKernelGivesTheClusterFormsBits, every form),
#      bench_gdn_delta's decode cases under both with the dense kernel's phase clock (DUET_DENSE_CLOCK=1: a block's
#      cycles in each phase, its A and Q entries' beside them), `duet run` at 16, 4 and 64 streams;
#  13. the walk's batched normalizing of a chunk's new keys and queries (DUET_DELTA_NORM_BATCH=1) and its inputs by
#      bulk copies (DUET_DELTA_WALK_BULK=1) (NORM_AB=1; 48th round, prepared, off; the same bits): their bits tests
#      (GdnKernelsTest.BatchedNormalizingKeepsTheWalksBits, BulkInputsKeepTheWalksBits) beside the tensor-core walk's,
#      bench_gdn_delta's prefill cases under each (the default's fingerprints), with the walk's phase clock
#      (DUET_WALK_CLOCK=1), and `duet run` prefill of 1K and 4K prompts against the default;
#  14. the dense decode kernel's row vectors asked for before its ring (VECTORS_AB=1; DUET_DELTA_DENSE_VECTORS_FIRST=1,
#      48th round, prepared, off; the same bits): its bits tests (DenseDecodeKernelGivesTheClusterFormsBits,
#      DenseKernelFormsAgreeAtSixtyFourRows), bench_gdn_delta's decode cases under both with the phase clock (the
#      same fingerprints), `duet run` at 16 and 64 streams against the default;
# while BUDGET_S lasts, each stage skipped once it would not fit. Every stage writes its lines as it goes, to stdout
# and OUT/log (never through a pipe that holds them until the end: 41st round).
# STAGES (e.g. "1 8") runs only those stages (default: every one).
#   usage: tools/gpu_prepared_ab.sh OUT [WORK=/tmp/9b] [ROUNDS=2] [BUDGET_S=540]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; rounds=${3:-2}; budget=${4:-540}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
fits() {  # fits SECONDS: whether a stage of about that long ends inside the budget
  (( $(elapsed) + $1 <= budget )) || { echo "(skipped: about $1 s, $(( budget - $(elapsed) )) s left)"; return 1; }
}
bench_gdn_settings() {  # REPS CASES FILE SETTING...: bench_gdn_delta's CASES under each setting (`-` for none)
  local reps=$1 cases=$2 file=$3 setting
  shift 3
  for setting in "$@"; do
    local assignments=()
    [[ $setting == - ]] || read -r -a assignments <<<"$setting"
    fits 60 && env "${assignments[@]}" timeout 60 device/tests/cuda/bench_gdn_delta "$reps" "$cases" > "$file" 2>&1
    echo "-- $setting"; cat "$file"
  done
}
stage() {  # stage N: whether STAGES names stage N (or is unset)
  [[ -z ${STAGES:-} || " $STAGES " == *" $1 "* ]] || { echo "(stage $1 not asked for)"; return 1; }
}
source tools/device_pack_env.sh
start_checkpoint "$work" "$out"

echo "== 1. bits tests"
if stage 1; then
run_gpu_test 'SkinnyGemmTma.TheDeepRingKeepsEveryBit' "$out/deep-test.txt" 120
[[ ${SPLIT_AB:-0} == 1 ]] && run_gpu_test '*QueriesSplitOverBlocksGiveTheSameRows*' "$out/split-test.txt" 180
fi
echo "done at $(elapsed) s"

echo "== 2. bench_skinny_gemm --tma-blocks"
if stage 2; then
if [[ ${BENCH:-0} == 1 ]] && fits 150; then
  timeout 150 device/tests/cuda/bench_skinny_gemm --tma-blocks > "$out/tma-blocks.txt" 2>&1
  cat "$out/tma-blocks.txt"
fi
fi
await_checkpoint "$work" "$out"
echo "done at $(elapsed) s"

echo "== 3. duet run"
if stage 3; then
if [[ ${DEEP_AB:-0} == 1 ]]; then
  for streams in 16 32 64; do
    fits 70 && tools/gpu_launch_ab.sh "$work" "$streams" "$rounds" DUET_SKINNY_TMA_DEEP=0 -
  done
fi
fi
echo "done at $(elapsed) s"

echo "== 4. exactness (EXACT=0 skips it, after tools/gpu_checks.sh ran it on the same pack)"
if stage 4; then
if [[ ${EXACT:-1} == 1 ]] && fits 170; then
  RUN_LENGTHS="" timeout 170 tools/gpu_bench.sh "$out/exact" "$work" 1,4,16,64 \
    > "$out/exact.txt" 2>&1
  grep -E "^exactness|^level .*failed [1-9]" "$out/exact.txt"
fi
fi
echo "done at $(elapsed) s"

echo "== 5. structured-output rows launched ahead"
if stage 5; then
run_gpu_test '*CudaMaskedSteps*' "$out/masked-ahead-test.txt" 120
schema='{"type":"json_schema","json_schema":{"name":"notes","schema":{"type":"object","properties":{"title":{"type":
"string"},"notes":{"type":"array","items":{"type":"string"}}},"required":["title","notes"],"additionalProperties":false}}}'
if fits 190; then
  DUET_LOOKAHEAD_MASKED=1 device/bin/duet serve "$work/model" --backend cuda --host 127.0.0.1 --port 18085 \
    --parallel 64 --context 2048 --max-tokens 256 --queue-limit 256 > "$out/masked-serve.out" 2> "$out/masked-serve.log" &
  server=$!
  for _ in $(seq 1 400); do curl -sf http://127.0.0.1:18085/health > /dev/null 2>&1 && break; sleep 0.25; done
  # (100 s cut the 44th round's run in its seeded 64-stream level: greedy, seeded and penalized take about 150 s)
  timeout 170 device/bin/duet bench --url http://127.0.0.1:18085 --levels 1,16,64 --tokens 48 --reps 1 --alone \
    --serial --sampling all --response-format "$schema" > "$out/masked-exact.txt" 2>&1
  grep -E "^exactness|^level .*failed [1-9]" "$out/masked-exact.txt"
  curl -sf http://127.0.0.1:18085/metrics | grep -E '^duet_engine_steps(_ahead)?_total[{ ]|^duet_grammar_masks_total'
  kill -TERM $server; wait $server
fi
fits 150 && BENCH_FORMAT=$schema tools/gpu_served_ab.sh "$out/masked-ab" "$work" "$rounds" DUET_LOOKAHEAD_MASKED=0 \
  DUET_LOOKAHEAD_MASKED=1
fi
echo "done at $(elapsed) s"

echo "== 6. duet run, early loads (and the query split after a 16K prompt: SPLIT_AB=1)"
if stage 6; then
[[ ${SPLIT_AB:-0} == 1 ]] && fits 70 &&
  PROMPT_LEN=16384 tools/gpu_launch_ab.sh "$work" 1 "$rounds" - DUET_ATTN_QUERY_SPLIT_ROWS=4
[[ ${SPLIT_AB:-0} == 1 ]] && fits 70 && tools/gpu_launch_ab.sh "$work" 16 "$rounds" - DUET_ATTN_QUERY_SPLIT_ROWS=16
fits 60 && tools/gpu_launch_ab.sh "$work" 1 "$rounds" - DUET_CUDA_EARLY_LOADS=1
fi
echo "done at $(elapsed) s"

echo "== 7. bench_skinny_gemm --tma-blocks with the four-slice shapes in two slices (their own bits)"
if stage 7; then
# The out projections and MLP down take 4 slices (clusters of four); at 48-64 rows they read 61-75% of a chained read
# of the same bytes, and the ring of 6 stages lost there (43rd round) where it won for the one-slice shapes.
fits 150 && DUET_SKINNY_TMA_SLICES="4096x4096:2,4096x12288:2" timeout 150 device/tests/cuda/bench_skinny_gemm \
  --tma-blocks > "$out/tma-blocks-2slices.txt" 2>&1 && grep -E "^(gdn.out_proj|attn.o_proj|mlp.down) |bit checks" \
  "$out/tma-blocks-2slices.txt"
fi
echo "done at $(elapsed) s"

echo "== 8. the dense delta-rule kernel's ring of bulk copies (BULK_AB=1)"
if stage 8 && [[ ${BULK_AB:-0} == 1 ]]; then
  run_gpu_test '*DenseDecodeKernelGivesTheClusterFormsBits*' "$out/bulk-test.txt" 120
  bench_gdn_settings 20 decode "$out/bulk-bench.txt" DUET_DELTA_DENSE_BULK=0 -
  for streams in 64 32; do
    fits 70 && tools/gpu_launch_ab.sh "$work" "$streams" "$rounds" DUET_DELTA_DENSE_BULK=0 -
  done
fi
echo "done at $(elapsed) s"

echo "== 9. the dense kernel from one row (DENSE_AB=1)"
if stage 9 && [[ ${DENSE_AB:-0} == 1 ]]; then
  bench_gdn_settings 20 "decode 1" "$out/dense-bench.txt" DUET_DELTA_DECODE=clusters DUET_DELTA_DECODE=dense
  fits 70 && tools/gpu_launch_ab.sh "$work" 1 "$rounds" - DUET_DELTA_DECODE=dense \
    "DUET_DELTA_DECODE=dense DUET_CUDA_EARLY_LOADS=1"
  fits 70 && tools/gpu_launch_ab.sh "$work" 16 "$rounds" DUET_DELTA_DECODE=dense:32 -
fi
echo "done at $(elapsed) s"

echo "== 10. the chunked walk's forms (WALK_AB=1)"
if stage 10 && [[ ${WALK_AB:-0} == 1 ]]; then
  run_gpu_test '*WalkFormsKeepEveryBit*' "$out/walk-test.txt" 120
  bench_gdn_settings 10 prefill "$out/walk-bench.txt" "DUET_DELTA_WALK_TILES=0 DUET_DELTA_WALK_WIDE=0" \
    DUET_DELTA_WALK_WIDE=0 - DUET_DELTA_WALK_SPLIT=1
  fits 90 && tools/gpu_prefill_ab.sh "$work" 1024,4096 2 - DUET_DELTA_WALK_SPLIT=1
  # Where a 1K and a 4K prompt's prefill goes, kernel by kernel (exclusive times: the GEMMs, the walk, attention).
  if [[ -f device/lib/libkernel_trace.so ]]; then
    for length in 1024 4096; do fits 40 && PREFILL=$length tools/gpu_timeline.sh "$out" 1 2 "$work"; done
  fi
fi
echo "done at $(elapsed) s"

echo "== 11. the 46th round's prefill changes (PREFILL_AB=1)"
if stage 11 && [[ ${PREFILL_AB:-0} == 1 ]]; then
  run_gpu_test '*TensorCoreWalk*:*WideConvRows*' "$out/prefill-tests.txt" 150
  grep -h "delta rule against double" "$out/prefill-tests.txt"
  bench_gdn_settings 10 prefill "$out/mma-bench.txt" - DUET_DELTA_WALK_MMA=0 \
    "DUET_WALK_CLOCK=1 DUET_DELTA_WALK_MMA=0" DUET_WALK_CLOCK=1
  fits 150 && tools/gpu_prefill_ab.sh "$work" 1024,4096 2 - DUET_DELTA_WALK_MMA=0 DUET_CONV_WIDE=0 \
    DUET_SAMPLE_ROWS_PINNED=1
  [[ -f device/lib/libkernel_trace.so ]] && fits 40 && PREFILL=4096 tools/gpu_timeline.sh "$out" 1 2 "$work"
fi
echo "done at $(elapsed) s"

echo "== 12. the dense decode kernel's keys through its ring (KEYS_AB=1)"
if stage 12 && [[ ${KEYS_AB:-0} == 1 ]]; then
  run_gpu_test '*DenseDecodeKernelGivesTheClusterFormsBits*' "$out/keys-test.txt" 120
  bench_gdn_settings 20 decode "$out/keys-bench.txt" - DUET_DELTA_DENSE_KEYS=0 "DUET_DENSE_CLOCK=1" \
    "DUET_DENSE_CLOCK=1 DUET_DELTA_DENSE_KEYS=0"
  for streams in 16 4 64; do
    fits 70 && tools/gpu_launch_ab.sh "$work" "$streams" "$rounds" - DUET_DELTA_DENSE_KEYS=0
  done
fi
echo "done at $(elapsed) s"

echo "== 13. the walk's batched normalizing and bulk inputs (NORM_AB=1)"
if stage 13 && [[ ${NORM_AB:-0} == 1 ]]; then
  run_gpu_test '*BatchedNormalizingKeepsTheWalksBits*:*BulkInputsKeepTheWalksBits*:*TensorCoreWalk*' \
    "$out/norm-test.txt" 120
  prints() { grep -o "^prefill.*rows *[0-9]*\|out [0-9a-f]* state [0-9a-f]*" "$1" | paste - -; }
  for setting in X=1 DUET_DELTA_NORM_BATCH=1 DUET_DELTA_WALK_BULK=1; do
    fits 40 && env "$setting" timeout 40 device/tests/cuda/bench_gdn_delta 10 prefill > "$out/norm-bench-$setting.txt" 2>&1
    echo "-- $setting"; cat "$out/norm-bench-$setting.txt"
    if [[ -n "$(prints "$out/norm-bench-X=1.txt")" &&
      "$(prints "$out/norm-bench-X=1.txt")" == "$(prints "$out/norm-bench-$setting.txt")" ]]; then
      echo "fingerprints: the default's"
    else
      echo "fingerprints: DIFFER from the default's (or missing)"
    fi
  done
  bench_gdn_settings 10 prefill "$out/norm-clock.txt" DUET_WALK_CLOCK=1 "DUET_WALK_CLOCK=1 DUET_DELTA_NORM_BATCH=1" \
    "DUET_WALK_CLOCK=1 DUET_DELTA_WALK_BULK=1"
  fits 110 && tools/gpu_prefill_ab.sh "$work" 1024,4096 "$rounds" - DUET_DELTA_NORM_BATCH=1 DUET_DELTA_WALK_BULK=1
fi
echo "done at $(elapsed) s"

echo "== 14. the dense kernel's vectors first (VECTORS_AB=1)"
if stage 14 && [[ ${VECTORS_AB:-0} == 1 ]]; then
  run_gpu_test '*DenseDecodeKernelGivesTheClusterFormsBits*:*DenseKernelFormsAgreeAtSixtyFourRows*' \
    "$out/vectors-test.txt" 150
  for setting in X=1 DUET_DELTA_DENSE_VECTORS_FIRST=1; do
    fits 40 && env "$setting" DUET_DENSE_CLOCK=1 timeout 40 device/tests/cuda/bench_gdn_delta 20 decode \
      > "$out/vectors-bench-$setting.txt" 2>&1
    echo "-- $setting"; cut -c1-330 "$out/vectors-bench-$setting.txt"
  done
  prints() { grep -o "^decode.*rows *[0-9]*\|out [0-9a-f]* state [0-9a-f]*" "$1" | paste - -; }
  if [[ -n "$(prints "$out/vectors-bench-X=1.txt")" && "$(prints "$out/vectors-bench-X=1.txt")" == \
    "$(prints "$out/vectors-bench-DUET_DELTA_DENSE_VECTORS_FIRST=1.txt")" ]]; then
    echo "fingerprints: the same under both"
  else
    echo "fingerprints: DIFFER (or missing)"
  fi
  for streams in 16 64; do
    fits 70 && tools/gpu_launch_ab.sh "$work" "$streams" "$rounds" - DUET_DELTA_DENSE_VECTORS_FIRST=1
  done
fi
echo "done at $(elapsed) s"
