#!/usr/bin/env bash
# On the GPU machine, in one device call: a random Qwen3.5-9B-shaped checkpoint and transformers' FP32/BF16 rows on
# 40 prompts (tools/make_9b_references.py), duet's rows on the same prompts (`duet rows`, CUDA backend), and the
# rows gate of design/targets.md (tools/rows_gate.py). Run from the repository root after unpacking the build
# (tools/pack_for_device.sh); logs and the gate's JSON go to OUT.
#   usage: tools/gpu_gate.sh OUT [WORK=/tmp/9b]
set -euo pipefail
out=$1; work=${2:-/tmp/9b}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$(date +%s)
[ -f "$work/ref/0.fp32.f32" ] || python3 tools/make_9b_references.py --out "$work" 2>&1 | grep -v -i warn | tee "$out/refs.log"
echo "references ready after $(( $(date +%s) - start )) s"
device/bin/duet rows "$work/model" --prompts "$work/prompts.json" --out "$work/duet" --backend cuda 2>&1 | tee "$out/duet_rows.log"
echo "duet rows done after $(( $(date +%s) - start )) s"
python3 tools/rows_gate.py --refs "$work" --duet "$work/duet" --json "$out/gate.json" 2>&1 | tee "$out/gate.log"
