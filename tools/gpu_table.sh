#!/usr/bin/env bash
# On the GPU machine: every figure of issue 16's table (docs/benchmarks.md, "Where issue 16 stands") in one call, on
# the 9B-shaped checkpoint that tools/make_9b_references.py wrote (WORK/model), with the machine's copy and read
# rates for the fractions of the limit. About 4 minutes; each stage is bounded and says so when it fails.
#   1. the copy rate (a 1 GiB device-to-device copy, bytes read plus written) and the read rate (a 1 GiB sum), torch;
#   2. decode at 1, 16 and 64 streams (`duet run`, 1,024 random ids, 256 tokens; tools/gpu_launch_ab.sh, 2 rounds);
#   3. prefill of 1K, 4K and 16K prompts (`duet run`; tools/gpu_prefill_ab.sh, 2 rounds);
#   4. served (`duet serve` + `duet bench`): one stream greedy and seeded (the bench's seeded mode: temperature 0.8,
#      top-p 0.95; the issue names 0.7 and 0.9), 16 and 64 streams greedy, the time to first token of a 1,024-token
#      prompt alone, and the serving load (64 x 1,024-token prompts, 256-token replies, greedy; 2 rounds, the first
#      carries the server's warm-up).
# Settings (environment assignments, e.g. DUET_ATTN_LANES=regs) apply to every stage when exported before the call.
#   usage: tools/gpu_table.sh OUT [WORK=/tmp/9b]
set -uo pipefail
out=$1; work=${2:-/tmp/9b}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=${DUET:-device/bin/duet}
port=${BENCH_PORT:-18093}
url=http://127.0.0.1:$port
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }
[[ -f $work/model/config.json ]] || { echo "no $work/model: run tools/make_9b_references.py --checkpoint-only first"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$out/machine.txt"

stamp "1. copy and read rates"
timeout 60 python3 - <<'EOF' 2>&1 | tee "$out/rates.txt"
import torch
n = 1 << 30
x = torch.empty(n, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
xf = x.view(torch.float32)
def best(f, reps=10):
    f(); torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return min(times)
copy = best(lambda: y.copy_(x))
read = best(lambda: xf.sum())
print(f"copy rate {2 * n / copy / 1e9:.0f} GB/s (read + write of a 1 GiB copy); read rate {n / read / 1e9:.0f} GB/s (a 1 GiB sum)")
EOF

stamp "2. decode (duet run)"
for streams in 1 16 64; do
  timeout 120 tools/gpu_launch_ab.sh "$work" "$streams" 2 - | tee -a "$out/decode.txt" || stamp "decode at $streams streams failed"
done

stamp "3. prefill (duet run)"
timeout 150 tools/gpu_prefill_ab.sh "$work" 1024,4096,16384 2 - | tee "$out/prefill.txt" || stamp "prefill failed"

stamp "4. served (log: $out/serve.log)"
"$duet" serve "$work/model" --backend cuda --host 127.0.0.1 --port "$port" --parallel 64 --context 2048 --max-tokens 256 \
  --queue-limit 256 > "$out/serve.out" 2> "$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 400); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.5; done
curl -sf "$url/health" >/dev/null || { stamp "the server did not start"; tail -20 "$out/serve.log"; exit 1; }
bench() {  # LABEL ARGS...: one `duet bench` run, its level lines labelled
  local label=$1; shift
  timeout 120 "$duet" bench --url "$url" --reps 1 "$@" 2>&1 | grep -E "^level" | sed "s/^/[$label] /" | tee -a "$out/served.txt"
}
bench "1 stream, greedy" --levels 1 --tokens 256 --sampling greedy
bench "1 stream, seeded" --levels 1 --tokens 256 --sampling seeded
bench "16 streams, greedy" --levels 16 --tokens 256 --sampling greedy
bench "64 streams, greedy" --levels 64 --tokens 256 --sampling greedy
bench "1K prompt, time to first token" --levels 1 --tokens 8 --sampling greedy --prompt-tokens 1024
for round in 1 2; do
  bench "serving load, round $round" --levels 64 --tokens 256 --sampling greedy --prompt-tokens 1024
done
stamp "done"
