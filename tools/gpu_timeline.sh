#!/usr/bin/env bash
# On the GPU machine: the kernel timeline of `duet run` decode steps (tests/cuda/kernel_trace.cc through CUPTI, graphs
# and dependent launches as they run) on the 9B-shaped checkpoint of tools/make_9b_references.py (WORK/model), 1,024
# random ids of seed 1024, TOKENS tokens at STREAMS streams, and its summary (tools/kernel_trace_summary.py: each
# kernel's exclusive time a step, GPU busy time). The step's idle share is not the tracer's to give (CUPTI's own work
# lengthens the host's turn between steps): DUET_STEP_GAPS=1 gives it. Settings apply when exported before the call.
# PREFILL=LEN instead: a prompt of LEN random ids and 2 tokens, and the summary of the steps that walk a prompt's chunks
# (--with chunk_state_kernel: the prefill's kernels, cuBLASLt's GEMMs among them, each by its exclusive time); writes
# OUT/timeline-prefill-LEN-STREAMS.*.
# Needs a pack with kernel_trace (PACK_ONLY="... kernel_trace"). Writes OUT/timeline-STREAMS.tsv.xz and .md.
#   usage: tools/gpu_timeline.sh OUT [STREAMS=1] [TOKENS=128] [WORK=/tmp/9b]
#   e.g.   PREFILL=4096 tools/gpu_timeline.sh /tmp/out      # where a 4K prompt's prefill goes
set -uo pipefail
out=$1; streams=${2:-1}; tokens=${3:-128}; work=${4:-/tmp/9b}
prompt_len=${PREFILL:-1024}; name=$streams; steps=()
[[ -n ${PREFILL:-} ]] && { tokens=2; name=prefill-$PREFILL-$streams; steps=(--with chunk_state_kernel); }
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -f device/lib/libkernel_trace.so ]] || { echo "no device/lib/libkernel_trace.so: pack with kernel_trace"; exit 1; }
[[ -f $work/model/config.json ]] || { echo "no $work/model: run tools/make_9b_references.py --checkpoint-only first"; exit 1; }
ids=$(python3 -c "import random; random.seed(1024); print(','.join(str(random.randrange(248044)) for _ in range($prompt_len)))")
trace=$out/timeline-$name.tsv
CUDA_INJECTION64_PATH=$PWD/device/lib/libkernel_trace.so DUET_KERNEL_TRACE=$trace timeout 120 device/bin/duet run \
  "$work/model" --backend cuda --prompt-ids "$ids" --max-tokens "$tokens" --ignore-eos --streams "$streams" \
  2>&1 >/dev/null | tail -1 | grep -oE '(prefill|decode) [^|]*'
python3 tools/kernel_trace_summary.py "$trace" --top 20 "${steps[@]}" > "$out/timeline-$name.md" 2>&1
sed -n '1,2p;/kernel family/,/^$/p' "$out/timeline-$name.md"
xz -T4 -f "$trace"
