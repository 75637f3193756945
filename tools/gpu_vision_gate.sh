#!/usr/bin/env bash
# On the GPU machine, in one device call (issue 21, "How it is shown", the H200 part): the random 9B-shaped checkpoint
# with a full-size random vision tower (tools/vision_gate_9b.py: WORK/model-vl beside make_9b_references.py's text-only
# WORK/model, which stays as it is), and
#  (a) the rows gate over prompts with images: transformers FP32 and BF16 final-norm rows of 5 chats holding 1 or 2
#      images (224x224 to 1024x1024, aspect ratios up to 1:7.5), duet's rows of the same ids and image files
#      (`duet rows --image-controls`, CUDA), mean |error| against FP32 no larger than BF16's; planted controls (each
#      image's rows transposed, which must fail; 1-D positions, reported);
#  (b) exactness with image requests among text ones on `duet serve --backend cuda`: 16 chat requests (6 with images,
#      greedy and seeded) alone and then all at once, byte for byte; controls (another seed, a mirrored image) must
#      differ; also duet's /tokenize ids of the gate's chats against transformers' processor ids;
#  (c) time to first token of a 1024x1024 image + ~100 text tokens: duet streamed beside transformers BF16 (processor
#      + forward) measured in the same call.
# Run from the repository root after unpacking the build (tools/pack_for_device.sh: device/bin/duet, device/lib).
# Logs and JSON go to OUT; the last lines are the summary. About 4-5 minutes, most of it loading 18 GB twice.
#   usage: tools/gpu_vision_gate.sh OUT [WORK=/tmp/9b]
set -euo pipefail
out=$1; work=${2:-/tmp/9b}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=${DUET:-device/bin/duet}
port=${PORT:-18090}
start=$(date +%s)
phase() { echo "=== $(date +%H:%M:%S) +$(( $(date +%s) - start )) s: $*" | tee -a "$out/phases.log"; }
status=0

phase "the text checkpoint (make_9b_references.py --checkpoint-only, once)"
if [ ! -f "$work/model/model.safetensors.index.json" ]; then
  python3 tools/make_9b_references.py --out "$work" --checkpoint-only 2>&1 | grep -v -i warn | tee "$out/checkpoint.log"
fi

phase "transformers: the vision checkpoint, FP32 and BF16 rows of the image prompts, TTFT"
python3 tools/vision_gate_9b.py reference --work "$work" --out "$out" 2>&1 | grep -v -i warn | tee "$out/reference.log"

phase "duet rows (CUDA) of the same ids and images, with the planted controls"
rm -rf "$work/vl/duet"
$duet rows "$work/model-vl" --prompts "$work/vl/prompts.json" --out "$work/vl/duet" --backend cuda --image-controls \
  2>&1 | tee "$out/duet_rows.log" || status=1

phase "(a) the rows gate"
python3 tools/vision_gate_9b.py gate --work "$work" --out "$out" 2>&1 | tee "$out/gate.log" || status=1

phase "duet serve --backend cuda on the vision checkpoint"
# No prompt cache: (b) compares fresh computations, (c) times a fresh prefill. Bodies up to 32 MiB (images inline).
$duet serve "$work/model-vl" --backend cuda --port "$port" --parallel 20 --context 8192 --prompt-cache-gib 0 \
  --max-body-bytes 33554432 > "$out/serve.out" 2> "$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 360); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "duet serve exited:"; tail -20 "$out/serve.log"; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "duet serve not ready:"; tail -20 "$out/serve.log"; exit 1; }

phase "ids, (b) exactness, (c) TTFT through the server"
python3 tools/vision_gate_serve.py --url "http://127.0.0.1:$port" --work "$work" --out "$out" 2>&1 \
  | tee "$out/serve_checks.log" || status=1
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^duet_vision_tower' > "$out/metrics_vision.txt" || true
kill $server 2>/dev/null || true
wait $server 2>/dev/null || true
trap - EXIT

phase "done"
echo "==================== vision gate summary (OUT=$out)"
grep -h '^SUMMARY' "$out/gate.log" "$out/serve_checks.log" || true
grep -h -i -E 'vision tower|images:' "$out/serve.log" | head -3 || true
sed 's/^/metrics: /' "$out/metrics_vision.txt" || true
grep -h -E '^prompt [0-9]+:' "$out/duet_rows.log" | sed 's/^/duet rows: /' || true
echo "vision gate: $([ $status = 0 ] && echo PASS || echo FAIL) after $(( $(date +%s) - start )) s"
exit $status
