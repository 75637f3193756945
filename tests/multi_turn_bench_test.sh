#!/usr/bin/env bash
# `duet bench --multi-turn` against the demo model on the CPU: with the prompt cache on, turns 2 and 3 resume the
# system prompt and the earlier turns (cached_tokens of at least the system prompt's whole 64-token blocks); the
# control, the same conversation against a server with `--prompt-cache-gib 0`, resumes nothing.
#   usage: multi_turn_bench_test.sh DUET_BINARY DEMO_DIR
set -euo pipefail
duet=$1 demo=$2
source "$(dirname "$0")/bench_server.sh"
# The cached tokens of turn N in the bench's table (turn, conversation, prompt tokens, cached tokens, ttft, total).
cached() { awk -v t="$2" '$1 == t && NF == 6 {print $4}' "$1"; }

bench=(bench --multi-turn --turns 3 --system-tokens 600 --reply-tokens 8)
start
"$duet" "${bench[@]}" --url "$url" | tee "$work/on.txt"
stop
[[ $(cached "$work/on.txt" 1) -eq 0 ]] || { echo "FAIL: the first turn resumed tokens from an empty cache"; exit 1; }
for turn in 2 3; do
  [[ $(cached "$work/on.txt" $turn) -ge 576 ]] || { echo "FAIL: turn $turn resumed less than the system prompt"; exit 1; }
done

start --prompt-cache-gib 0
"$duet" "${bench[@]}" --url "$url" | tee "$work/off.txt"
stop
for turn in 1 2 3; do
  [[ $(cached "$work/off.txt" $turn) -eq 0 ]] || { echo "FAIL: turn $turn resumed tokens with the cache off"; exit 1; }
done
echo "ok"
