#!/usr/bin/env bash
# On the GPU machine: what a change to steps launched ahead (the engine's lookahead, issue 16 item 5; on by default on the
# CUDA backend since docs/benchmarks.md's 41st round, which this script measured) owes, in one call, most important
# first:
#   1. CudaModelTest.StepsLaunchedAheadReadTheirTokensOnTheDevice: carried rows against ids sent from the host;
#   2. served decode (tools/gpu_served_ab.sh: 1 stream greedy and seeded, 64 streams), DUET_LOOKAHEAD=0 against 1,
#      ROUNDS times in turn: tok/s, steps launched ahead and DUET_STEP_GAPS's GPU-clock idle time between steps; then
#      in process (`duet run --draft none` at 1 and 64 streams: the engine without HTTP);
#   3. the CudaModelTest suite, then exactness with DUET_LOOKAHEAD=1 (tools/gpu_bench.sh: 1, 4, 16 and 64 streams,
#      greedy, seeded and penalized; 0 unequal, 0 failed), then the rest of the GPU suite while the budget lasts.
# The checkpoint of tools/make_9b_references.py is made in WORK when missing (about 40 s, beside stage 1).
#   usage: tools/gpu_lookahead_check.sh OUT [WORK=/tmp/9b] [ROUNDS=1] [BUDGET_S=560]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; rounds=${3:-1}; budget=${4:-560}
mkdir -p "$out"
source tools/device_pack_env.sh
start_checkpoint "$work" "$out"

echo "== 1. the device-side test"
run_gpu_test '*StepsLaunchedAhead*' "$out/test.log"
await_checkpoint "$work" "$out"
echo "done at $(elapsed) s"

echo "== 2. DUET_LOOKAHEAD=0 against 1, served (duet run's greedy passes do not take the engine's path)"
timeout 240 tools/gpu_served_ab.sh "$out/served" "$work" "$rounds" DUET_LOOKAHEAD=0 DUET_LOOKAHEAD=1
echo "== 2b. the same in process (duet run --draft none: the engine without HTTP)"
for streams in 1 64; do
  RUN_ARGS="--draft none" timeout 120 tools/gpu_launch_ab.sh "$work" "$streams" "$rounds" DUET_LOOKAHEAD=0 DUET_LOOKAHEAD=1
done
echo "done at $(elapsed) s"

echo "== 3. checks with DUET_LOOKAHEAD=1"
DUET_GPU_SUITES='CudaModelTest' timeout 150 device/run_gpu_tests.sh > "$out/suite-model.log" 2>&1
grep -E "^=== summary|^FAILED" "$out/suite-model.log"
DUET_LOOKAHEAD=1 RUN_LENGTHS="" timeout 170 tools/gpu_bench.sh "$out/exact" "$work" 1,4,16,64 |
  grep -E "^exactness|^level .*failed [1-9]"
echo "exactness done at $(elapsed) s"
left=$(( budget - $(elapsed) ))
if (( left > 60 )); then
  DUET_GPU_SUITES='^(CublasLt|CudaVision|VisionTower|Elementwise|Skinny|Pinned|CudaExact|OpTotals|RuntimeAdapter|Sampling|CudaSampling|Attention|DeltaOrder|DependentLaunch|DeviceCounts|DeviceHead|CudaDrafts|Fp32|Gdn|Fixtures/CudaStep|Shapes|Fixtures/CudaMasked|Fixtures/CudaPrompt|Fixtures/CudaFork|HeadShapes)' \
    timeout "$left" device/run_gpu_tests.sh > "$out/suite-rest.log" 2>&1
  grep -E "^=== summary|^FAILED" "$out/suite-rest.log"
  grep -q "^=== summary" "$out/suite-rest.log" || echo "the rest of the suite ran out of budget at: $(grep '^=== ' "$out/suite-rest.log" | tail -1)"
fi
echo "done at $(elapsed) s"
