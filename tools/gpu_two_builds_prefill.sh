#!/usr/bin/env bash
# On the GPU machine: a change to the prefill kernels that should keep every bit, timed against the build before it in
# one call (issue 16): the pack (tools/device_pack_env.sh) in device/, the build before it in OLD/device/ (the same
# pack script's tarball, extracted there), the 9B-shaped checkpoint of tools/make_9b_references.py (made in WORK when
# missing, beside the tests):
#   1. the walk's and the conv's bits tests on the new build (GdnKernelsTest.TensorCoreWalk*, WalkForms*, WideConvRows*:
#      the forms against each other and the double recurrence, each with its control);
#   2. bench_gdn_delta's prefill cases under both builds, REPS repetitions, then with the walk's phase clock
#      (DUET_WALK_CLOCK=1); each case's fingerprints (outputs and state) must be the same under both;
#   3. `duet run` prefill of 1K and 4K prompts, the two builds alternating ROUNDS times (tools/gpu_prefill_ab.sh,
#      OLD_ENV: the old build's settings that make it the new one's defaults but for the change); where OLD holds no
#      duet (a call carries at most 64 MiB with the tree), the new build alone, against the setting NEW_ALT if given.
# Every stage writes its lines as it goes, to stdout and OUT/log.
#   usage: tools/gpu_two_builds_prefill.sh OUT OLD [WORK=/tmp/9b] [ROUNDS=2] [REPS=10] [OLD_ENV=-]
set -uo pipefail
out=$1; old=$2; work=${3:-/tmp/9b}; rounds=${4:-2}; reps=${5:-10}; old_env=${6:--}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
source tools/device_pack_env.sh
start_checkpoint "$work" "$out"

echo "== 1. bits tests"
run_gpu_test '*TensorCoreWalk*:*WalkForms*:*WideConvRows*' "$out/tests.txt" 180
echo "done at $(elapsed) s"

echo "== 2. bench_gdn_delta prefill, the old build then the new"
old_assignments=()
[[ $old_env == - ]] || read -r -a old_assignments <<<"$old_env"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for clock in X=1 DUET_WALK_CLOCK=1; do
  env "${old_assignments[@]}" "$clock" timeout 60 "$old/device/tests/cuda/bench_gdn_delta" "$reps" prefill \
    > "$out/bench-old-$clock.txt" 2>&1
  env "$clock" timeout 60 device/tests/cuda/bench_gdn_delta "$reps" prefill > "$out/bench-new-$clock.txt" 2>&1
  echo "-- old, $clock"; cat "$out/bench-old-$clock.txt"
  echo "-- new, $clock"; cat "$out/bench-new-$clock.txt"
done
fingerprints() { grep -o "^prefill.*rows *[0-9]*\|out [0-9a-f]* state [0-9a-f]*" "$1" | paste - -; }
if [[ -n "$(fingerprints "$out/bench-old-X=1.txt")" &&
  "$(fingerprints "$out/bench-old-X=1.txt")" == "$(fingerprints "$out/bench-new-X=1.txt")" ]]; then
  echo "fingerprints: the same under both builds"
else
  echo "fingerprints: DIFFER (or missing)"
  diff <(fingerprints "$out/bench-old-X=1.txt") <(fingerprints "$out/bench-new-X=1.txt")
fi
echo "done at $(elapsed) s"

echo "== 3. duet run prefill, the builds alternating"
await_checkpoint "$work" "$out"
if [[ -x $old/device/bin/duet ]]; then
  old_setting="bin=$old/device/bin/duet"
  [[ $old_env == - ]] || old_setting+=" $old_env"
  tools/gpu_prefill_ab.sh "$work" 1024,4096 "$rounds" "$old_setting" - | tee "$out/prefill-ab.txt"
else  # a call's files are at most 64 MiB with the tree: the old build's bench alone, the new duet against NEW_ALT
  tools/gpu_prefill_ab.sh "$work" 1024,4096 "$rounds" - ${NEW_ALT:+"$NEW_ALT"} | tee "$out/prefill-ab.txt"
fi
echo "done at $(elapsed) s"
