#!/usr/bin/env bash
# On the GPU machine: the serving load of issue 16 (64 requests of 1,024-token prompts, 256-token greedy replies;
# `duet bench --levels 64 --prompt-tokens 1024 --tokens 256`) under each step token budget and prefill chunk, to pick
# the engine's defaults by measurement (issue 16, item 6). Each setting gets its own server on the 9B-shaped checkpoint
# of tools/make_9b_references.py (WORK/model), one warm-up round, then ROUNDS measured rounds; one line a round.
#   usage: tools/gpu_step_budget_sweep.sh OUT [WORK=/tmp/9b] [ROUNDS=2] [SETTINGS="STEP_TOKENS/CHUNK ..."]
#   e.g.   tools/gpu_step_budget_sweep.sh /tmp/out /tmp/9b 2 "2048/256 4096/256 8192/512"
set -uo pipefail
out=$1; work=${2:-/tmp/9b}; rounds=${3:-2}
settings=${4:-"1024/256 2048/256 4096/256 8192/256 4096/512 8192/1024 16384/1024"}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=${DUET:-device/bin/duet}
port=${BENCH_PORT:-18094}
url=http://127.0.0.1:$port
[[ -f $work/model/config.json ]] || { echo "no $work/model: run tools/make_9b_references.py --checkpoint-only first"; exit 1; }
server=
trap '[[ -n $server ]] && kill $server 2>/dev/null; true' EXIT
for setting in $settings; do
  step_tokens=${setting%/*}; chunk=${setting#*/}
  log="$out/serve-$step_tokens-$chunk.log"
  "$duet" serve "$work/model" --backend cuda --host 127.0.0.1 --port "$port" --parallel 64 --context 2048 \
    --max-tokens 256 --queue-limit 256 --step-tokens "$step_tokens" --prefill-chunk "$chunk" > /dev/null 2> "$log" &
  server=$!
  for _ in $(seq 1 400); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.25; done
  if ! curl -sf "$url/health" >/dev/null; then echo "[$setting] the server did not start"; tail -5 "$log"; continue; fi
  for ((round = 0; round <= rounds; ++round)); do
    line=$(timeout 120 "$duet" bench --url "$url" --reps 1 --levels 64 --tokens 256 --sampling greedy \
      --prompt-tokens 1024 2>&1 | grep -E "^level")
    (( round == 0 )) && continue  # the server's warm-up
    echo "[step tokens $step_tokens, chunk $chunk] ${line:-FAILED}" | tee -a "$out/sweep.txt"
  done
  kill $server; wait $server 2>/dev/null; server=
done
