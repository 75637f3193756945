#!/usr/bin/env bash
# On the GPU machine: first speed and exactness figures of duet on the 9B-shaped checkpoint that
# tools/make_9b_references.py wrote (WORK/model): single-stream prefill and decode (`duet run`), then `duet serve`
# driven by `duet bench` at 1, 16 and 64 streams, greedy, seeded and penalized (SAMPLING, default all), each request
# also run alone and serially (0 unequal, 0 failed is the exactness check). Logs go to OUT.
#   usage: tools/gpu_bench.sh OUT [WORK=/tmp/9b] [LEVELS=1,16,64]
set -euo pipefail
out=$1; work=${2:-/tmp/9b}; levels=${3:-1,16,64}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=device/bin/duet
for n in ${RUN_LENGTHS-1024 4096}; do  # random ordinary token ids; run prints prefill and decode timings
  ids=$(python3 -c "import random; random.seed($n); print(','.join(str(random.randrange(248044)) for _ in range($n)))")
  $duet run "$work/model" --backend cuda --prompt-ids "$ids" --max-tokens 65 --ignore-eos 2>&1 >/dev/null | tail -1 | tee -a "$out/run.log"
  $duet run "$work/model" --backend cuda --prompt-ids "$ids" --max-tokens 65 --ignore-eos --chunk 1024 2>&1 >/dev/null | tail -1 | tee -a "$out/run.log"
done
$duet serve "$work/model" --backend cuda --port 18080 --parallel 64 --context 2048 --max-tokens 256 --queue-limit 256 > "$out/serve.out" 2> "$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 0.5; done
$duet bench --url http://127.0.0.1:18080 --levels "$levels" --tokens 32 --reps 1 --alone --serial --sampling "${SAMPLING:-all}" \
  > "$out/bench.log" 2>&1 || true
grep -v '^request ' "$out/bench.log"
tail -3 "$out/serve.log"
