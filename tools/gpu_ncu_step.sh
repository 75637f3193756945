#!/usr/bin/env bash
# On the GPU machine: Nsight Compute's full report of one launch of one kernel inside a decode step of `duet run` on the
# 9B-shaped checkpoint of tools/make_9b_references.py (WORK/model): 1,024 random ids of seed 1024, STREAMS streams,
# the kernels whose name matches REGEX, SKIP of their launches skipped first (past the prefill and the warm-up pass),
# clocks left to the GPU (--clock-control none, as the issue asks). Prints the speed-of-light, occupancy and launch
# figures and where the warps wait (the stall reasons, cycles a warp spends in each per instruction issued, largest
# first); the whole report goes to OUT/ncu-NAME-STREAMS.txt. Settings apply when exported before the call.
#   usage: tools/gpu_ncu_step.sh OUT REGEX [STREAMS=64] [SKIP=40] [WORK=/tmp/9b]
#   e.g.   tools/gpu_ncu_step.sh /tmp/out attention_decode_lanes 64    # the decode attention at 64 rows
set -uo pipefail
out=$1; regex=$2; streams=${3:-64}; skip=${4:-40}; work=${5:-/tmp/9b}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -f $work/model/config.json ]] || { echo "no $work/model: run tools/make_9b_references.py --checkpoint-only first"; exit 1; }
ids=$(python3 -c "import random; random.seed(1024); print(','.join(str(random.randrange(248044)) for _ in range(1024)))")
report=$out/ncu-${regex//[^A-Za-z0-9_]/_}-$streams.txt
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)  # (not on the GPU machine's PATH in every image)
timeout 300 "$ncu" --clock-control none --set full \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
  -k "regex:$regex" --launch-skip "$skip" --launch-count 1 \
  device/bin/duet run "$work/model" --backend cuda --prompt-ids "$ids" --max-tokens 8 --ignore-eos \
  --streams "$streams" > "$report" 2>&1 || echo "ncu: exit $? (report: $report)"
grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Block Limit|Registers Per Thread|Dynamic Shared Memory Per Block|Grid Size|Cluster Size" \
  "$report" | sed 's/  */ /g' | head -40
echo "stall reasons (warp cycles a warp waits per instruction issued, the largest):"
grep -E "smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio" "$report" | grep -v "not_issued" |
  awk '{print $NF, $1}' | sort -g -r | head -8
