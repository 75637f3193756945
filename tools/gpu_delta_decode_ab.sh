#!/usr/bin/env bash
# On the GPU machine: the delta rule's decode switches that keep every bit (issue 16 item 2; docs/benchmarks.md, 41st
# round), timed, in one call, on a pack of the change (tools/device_pack_env.sh) and the 9B-shaped checkpoint of
# tools/make_9b_references.py (made in WORK when missing, about 40 s, beside the first stages):
#   1. bench_gdn_delta's decode cases (one layer, 1 / 16 / 64 rows, folds) under each switch: the out and state
#      fingerprints must equal the default's, and the read rate of the one-row states is printed;
#   2. GdnKernelsTest's dense-kernel test (the rolling loads' bits against the cluster form's);
#   3. `duet run` decode at 64 streams (tools/gpu_launch_ab.sh, ROUNDS rounds): default (the ring of bulk copies since
#      the 44th round), DUET_DELTA_DENSE_BULK=0 (the rolling loads of 16 rows, the 42nd round's), with
#      DUET_DELTA_DENSE_ROLL=0 too (batches), DUET_DELTA_ORDER=longest; then at one stream: default against
#      DUET_CUDA_EARLY_LOADS=1;
#   4. ncu on the dense kernel at 64 rows under each of its forms (DRAM throughput, eligible warps, registers), while
#      BUDGET_S lasts.
# Every stage writes its lines as it goes, to stdout and OUT/log, never through a pipe that holds them until the end
# (a call's time limit kills the pipe with its buffer: 41st round).
#   usage: tools/gpu_delta_decode_ab.sh OUT [WORK=/tmp/9b] [ROUNDS=2] [BUDGET_S=540]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; rounds=${3:-2}; budget=${4:-540}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
source tools/device_pack_env.sh
start_checkpoint "$work" "$out"

echo "== 1. bench_gdn_delta, decode cases, by switch (fingerprints must match the default's)"
rolling=DUET_DELTA_DENSE_BULK=0 batches="DUET_DELTA_DENSE_BULK=0 DUET_DELTA_DENSE_ROLL=0"
for setting in - "$rolling" "$batches" DUET_DELTA_ORDER=longest DUET_CUDA_EARLY_LOADS=1; do
  assignments=()
  [[ $setting == - ]] || read -r -a assignments <<<"$setting"
  echo "-- $setting"
  env "${assignments[@]}" timeout 60 device/tests/cuda/bench_gdn_delta 20 decode > "$out/bench.txt" 2>&1
  grep -E "rows|row " "$out/bench.txt"
done
echo "done at $(elapsed) s"

echo "== 2. the dense kernel's bits, batches, rolling loads and the ring, against the cluster form"
run_gpu_test '*DenseDecodeKernelGivesTheClusterFormsBits*' "$out/dense-test.txt" 60
await_checkpoint "$work" "$out"
echo "done at $(elapsed) s"

echo "== 3. duet run, 64 streams, then one"
tools/gpu_launch_ab.sh "$work" 64 "$rounds" - "$rolling" "$batches" DUET_DELTA_ORDER=longest
echo "done at $(elapsed) s"
tools/gpu_launch_ab.sh "$work" 1 "$rounds" - DUET_CUDA_EARLY_LOADS=1
echo "done at $(elapsed) s"

echo "== 4. ncu on the dense kernel at 64 rows, by form"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for setting in - "$rolling" "$batches"; do
  left=$(( budget - $(elapsed) ))
  (( left > 45 )) || { echo "(the budget ends before $setting)"; break; }
  assignments=()
  [[ $setting == - ]] || read -r -a assignments <<<"$setting"
  echo "-- $setting"
  env "${assignments[@]}" timeout $(( left - 5 )) "$ncu" --clock-control none --set full --kernel-name regex:decode_dense \
    --launch-skip 3 --launch-count 1 device/tests/cuda/bench_gdn_delta 4 "decode 64 rows" > "$out/ncu-${setting//[^A-Za-z0-9_-]/_}.txt" 2>&1
  grep -E "^ +(Duration|DRAM Throughput|Eligible Warps Per Scheduler|Registers Per Thread|Achieved Occupancy) " \
    "$out/ncu-${setting//[^A-Za-z0-9_-]/_}.txt"
done
echo "done at $(elapsed) s"
