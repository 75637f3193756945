#!/usr/bin/env bash
# On the GPU machine: what a change to the CUDA backend owes before it lands (issue 16, "How it is shown"), in one
# call within a budget, on a pack of the change (device/, or .devpack/device.tar.xz unpacked when device/ is missing)
# and the 9B-shaped checkpoint of tools/make_9b_references.py (made in WORK when missing, about 40 s):
#   1. the GPU suite (device/run_gpu_tests.sh; DUET_GPU_SUITES picks suites), bounded by what the budget leaves for
#      the rest; the suites it did not reach are named, so that the next call can run them alone; then its slowest
#      tests (tools/slowest_gpu_tests.py), what to make cheaper while the suite outgrows its share of a call;
#   2. exactness: `duet serve` + `duet bench --alone --serial` at 1, 4, 16 and 64 streams, greedy, seeded and penalized
#      (tools/gpu_bench.sh; 0 unequal, 0 failed);
#   3. where a decode step's GPU time goes (DUET_PROFILE=1 duet run, 1,024-token prompt, 128 tokens) at 64 streams and
#      one, and the host's share of a step (DUET_STEP_GAPS=1, 256 tokens), while the budget lasts;
#   4. the kernel timelines at one stream and 64 (tools/gpu_timeline.sh: each kernel's exclusive time with graphs and
#      dependent launches as they run), when the pack has kernel_trace and the budget lasts.
# Settings (environment assignments, e.g. DUET_CUDA_EARLY_LOADS=1) apply to every stage when exported before the call.
# OUT/summary.txt holds the suite's and exactness's verdicts (a call's output keeps only its last lines).
#   usage: tools/gpu_checks.sh OUT [WORK=/tmp/9b] [BUDGET_S=560]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; budget=${3:-560}
mkdir -p "$out"
source tools/device_pack_env.sh
if [[ ! -f $work/model/config.json ]]; then
  python3 tools/make_9b_references.py --out "$work" --checkpoint-only > "$out/make9b.log" 2>&1 ||
    { tail -5 "$out/make9b.log"; exit 1; }
  echo "checkpoint made at $(elapsed) s"
fi

echo "== 1. GPU suite (log: $out/suite.log)"
# Three runs at a time, the longest first (tools/run_gpu_tests.sh: most of their time is host references on one core;
# serially the suite outgrew its share of a call, 42nd round; the longest suites one run a shape since the 45th). A
# run that fails beside others runs again alone below, so that a failure of sharing the GPU is told from a failure of
# the code.
suite_s=$(( budget - 190 - $(elapsed) ))
DUET_GPU_JOBS=${DUET_GPU_JOBS:-3} \
  DUET_GPU_FIRST=${DUET_GPU_FIRST:-'AttentionKernels\.|GdnVerifyRowsTest|GdnKernelsTest|^Sampling'} \
  DUET_GPU_TEST_TIMES="$out/test-times" timeout $(( suite_s > 60 ? suite_s : 60 )) device/run_gpu_tests.sh \
  > "$out/suite.log" 2>&1
grep -E "^=== summary|^FAILED|^NOT ENDED" "$out/suite.log" | tail -12
python3 tools/slowest_gpu_tests.py "$out/test-times" 12
# One file for the per-test times: the device tool brings back only so many files, and 45 of them crowded out the
# exactness logs (45th round).
tar -cJf "$out/test-times.tar.xz" -C "$out" test-times && rm -rf "$out/test-times"
if ! grep -q "^=== summary" "$out/suite.log"; then
  echo "the suite ran out of budget at $(grep -c '^=== ' "$out/suite.log") suites; the last one begun:"
  grep "^=== " "$out/suite.log" | tail -1
fi
while IFS= read -r suite; do  # (read, not a word list: a run's name holds a '*')
  (( $(elapsed) < budget - 220 )) || { echo "(no time left to run $suite again alone)"; break; }
  pattern=${suite//./\\.}; pattern="^${pattern//\*/\\*}\$"  # the run's name (its gtest filter), literally
  if DUET_GPU_JOBS=1 DUET_GPU_SUITES="$pattern" timeout 120 device/run_gpu_tests.sh < /dev/null \
    > "$out/alone-${suite//[^A-Za-z0-9_]/_}.log" 2>&1
  then
    echo "$suite: passed alone (it failed only beside other suites)"
  else
    echo "$suite: FAILED again alone"
  fi
done < <(sed -n 's/^FAILED: //p' "$out/suite.log")
echo "suite done at $(elapsed) s"

echo "== 2. exactness"
# (its verdict also into OUT/summary.txt beside the suite's: a call's output keeps only its last lines)
grep -E "^=== summary|^FAILED|^NOT ENDED" "$out/suite.log" > "$out/summary.txt"
RUN_LENGTHS="" timeout 160 tools/gpu_bench.sh "$out/exact" "$work" 1,4,16,64 | grep -E "^exactness|^level .*failed [1-9]" |
  tee -a "$out/summary.txt"
echo "exactness done at $(elapsed) s"

echo "== 3. profiles"
ids=$(python3 -c "import random; random.seed(1024); print(','.join(str(random.randrange(248044)) for _ in range(1024)))")
step_run() {  # SETTING TOKENS STREAMS REPORT: one `duet run` of the ids under SETTING=1, its stderr to REPORT
  env "$1=1" timeout 60 device/bin/duet run "$work/model" --backend cuda --prompt-ids "$ids" --max-tokens "$2" \
    --ignore-eos --streams "$3" > /dev/null 2> "$4"
}
for streams in 64 1; do
  (( $(elapsed) < budget - 30 )) || break
  step_run DUET_PROFILE 128 $streams "$out/profile-$streams.txt"
  sed -n '/decode steps/,/^DUET_PROFILE: steps with prefill/p' "$out/profile-$streams.txt" | head -20
done
for streams in 64 1; do
  (( $(elapsed) < budget - 20 )) || break
  step_run DUET_STEP_GAPS 256 $streams "$out/gaps-$streams.txt"
  grep -A2 "DUET_STEP_GAPS" "$out/gaps-$streams.txt" | tail -1
done
if [[ -f device/lib/libkernel_trace.so ]]; then
  echo "== 4. timelines"
  for streams in 1 64; do
    (( $(elapsed) < budget - 25 )) || break
    tools/gpu_timeline.sh "$out" $streams 128 "$work"
  done
fi
echo "done at $(elapsed) s"
