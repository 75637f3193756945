#!/usr/bin/env bash
# On the GPU machine: the 47th round's decode changes to the delta rule (issue 16), checked and timed in one call on a
# pack (tools/device_pack_env.sh) and the 9B-shaped checkpoint of tools/make_9b_references.py (made in WORK when
# missing, beside the tests):
#   1. their bits tests: GdnKernelsTest.DenseDecodeKernelGivesTheClusterFormsBits (every form, the keys through the
#      ring among them), GdnKernelsTest.DenseKernelFormsAgreeAtSixtyFourRows (the forms under load, where the keys'
#      first form faulted) and GdnKernelsTest.FoldsAfterTheLastLayerLeaveEachLayersState (each with its control);
#   2. bench_gdn_delta's decode cases with the dense kernel's phase clock (DUET_DENSE_CLOCK=1: a block's mean cycles in
#      each phase, and its A and Q entries'), with the keys through the ring (the default since the 48th round) and
#      without them (DUET_DELTA_DENSE_KEYS=0); the same fingerprints under both;
#   3. `duet run` decode at STREAMS (tools/gpu_launch_ab.sh, ROUNDS rounds, alternating; every setting's tokens must be
#      the default's): the default against DUET_DELTA_DENSE_KEYS=0 and DUET_DELTA_FOLDS=step (every layer's folds in
#      one launch after the last GDN layer);
#   4. exactness with the folds' switch on (tools/gpu_bench.sh: `duet serve` + `duet bench --alone --serial` at 1, 4, 16
#      and 64 streams, greedy, seeded and penalized; 0 unequal, 0 failed), so that a winner can become the default.
# Every stage writes its lines as it goes, to stdout and OUT/log; a stage that would not end inside BUDGET_S is skipped.
#   usage: tools/gpu_dense_decode_ab.sh OUT [WORK=/tmp/9b] [ROUNDS=2] [STREAMS="64 16"] [BUDGET_S=570]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; rounds=${3:-2}; streams=${4:-64 16}; budget=${5:-570}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
source tools/device_pack_env.sh
fits() {  # fits SECONDS: whether a stage of about that long ends inside the budget
  (( $(elapsed) + $1 <= budget )) || { echo "(skipped: about $1 s, $(( budget - $(elapsed) )) s left)"; return 1; }
}
start_checkpoint "$work" "$out"

echo "== 1. bits tests"
run_gpu_test '*DenseDecodeKernelGivesTheClusterFormsBits*:*DenseKernelFormsAgreeAtSixtyFourRows*:*FoldsAfterTheLastLayer*' \
  "$out/tests.txt" 180
await_checkpoint "$work" "$out"
echo "done at $(elapsed) s"

echo "== 2. bench_gdn_delta decode, the phase clock"
# The keys' stages share the ring's slots, so a wrong wait shows under load, where few pieces pass (the first run of
# this form: the 10-piece bits test passed and the 64-row bench faulted): every decode case's fingerprints under both
# settings must be equal.
for setting in X=1 DUET_DELTA_DENSE_KEYS=0; do
  for case in "decode 64 rows" "decode 64, no" "decode 64, all" "decode 16" "decode 1 row"; do
    echo "-- $setting: $case"
    env "$setting" DUET_DENSE_CLOCK=1 timeout 30 device/tests/cuda/bench_gdn_delta 20 "$case" 2>&1 | cut -c1-330 |
      tee -a "$out/bench-$setting.txt"
  done
done
fingerprints() { grep -o "^decode.*rows *[0-9]*\|out [0-9a-f]* state [0-9a-f]*" "$1" | paste - - ; }
if [[ "$(fingerprints "$out/bench-X=1.txt")" == "$(fingerprints "$out/bench-DUET_DELTA_DENSE_KEYS=0.txt")" ]] &&
  [[ -n "$(fingerprints "$out/bench-X=1.txt")" ]]; then
  echo "fingerprints: the same under both"
else
  echo "fingerprints: DIFFER (or missing)"; diff <(fingerprints "$out/bench-X=1.txt") \
    <(fingerprints "$out/bench-DUET_DELTA_DENSE_KEYS=0.txt")
fi
echo "done at $(elapsed) s"

echo "== 3. duet run decode"
for n in $streams; do
  fits 130 || continue
  tools/gpu_launch_ab.sh "$work" "$n" "$rounds" - DUET_DELTA_DENSE_KEYS=0 DUET_DELTA_FOLDS=step > "$out/ab-$n.txt" 2>&1
  grep -E "mean|FAILED" "$out/ab-$n.txt"
  echo "at $(elapsed) s"
done

echo "== 4. exactness with DUET_DELTA_FOLDS=step"
if fits 170; then
  DUET_DELTA_FOLDS=step RUN_LENGTHS="" timeout 170 tools/gpu_bench.sh "$out/exact" "$work" \
    1,4,16,64 > "$out/exact.txt" 2>&1
  grep -E "^exactness|^level .*failed [1-9]" "$out/exact.txt"
fi
echo "done at $(elapsed) s"
