#!/usr/bin/env bash
# `duet bench --decisions --same-state` against the demo model on the CPU: with the prompt cache on, the decisions
# after the first about one state resume it (at 800 tokens, 403 of them the state: at least its 6 whole blocks); the
# control, a server with `--prompt-cache-gib 0`, resumes nothing.
#   usage: same_state_bench_test.sh DUET_BINARY DEMO_DIR
set -euo pipefail
duet=$1 demo=$2
source "$(dirname "$0")/bench_server.sh"
# The first decision's and the later ones' resumed tokens, from the bench's line for the length.
first() { sed -n 's/.*(resumed \([0-9]*\) tokens).*/\1/p' "$1"; }
later() { sed -n 's/.*resumed p50 \([0-9]*\) tokens.*/\1/p' "$1"; }

bench=(bench --decisions --same-state --decision-lengths 800 --decision-concurrency 2 --reps 2)
start
"$duet" "${bench[@]}" --url "$url" | tee "$work/on.txt"
stop
[[ $(first "$work/on.txt") -eq 0 ]] || { echo "FAIL: the first decision resumed tokens from an empty cache"; exit 1; }
[[ $(later "$work/on.txt") -ge 384 ]] || { echo "FAIL: the later decisions did not resume the state"; exit 1; }

start --prompt-cache-gib 0
"$duet" "${bench[@]}" --url "$url" | tee "$work/off.txt"
stop
[[ $(later "$work/off.txt") -eq 0 ]] || { echo "FAIL: decisions resumed tokens with the cache off"; exit 1; }
echo "ok"
