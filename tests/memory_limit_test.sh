#!/usr/bin/env bash
# `duet serve --memory-limit-gib`: the demo (a decision model: its joint head beside it) with an explicit --context
# whose memory plan does not fit the limit is refused at start, the plan's numbers (the decisions' share included)
# in the message, and nothing served; without --context the context shrinks until the plan fits the same limit. As
# the planted control, a limit that holds the plan starts.
#   usage: memory_limit_test.sh DUET_BINARY DEMO_MODEL
set -euo pipefail
duet=$1 demo=$2
args=(serve "$demo" --backend cpu --prompt-cache-gib 0 --port 0 --memory-limit-gib 0.25)
if out=$(timeout 60 "$duet" "${args[@]}" --context 65536 2>&1); then
  echo "$out"; echo "FAIL: a plan over the limit started"; exit 1
fi
grep -q "memory plan does not fit: .*decisions .*limit 256.0 MiB" <<<"$out" || { echo "$out"; echo "FAIL: no plan in the refusal"; exit 1; }
check_starts() {  # the server reaches "ready" with the given extra arguments, then is stopped
  local log
  log=$(mktemp)
  "$duet" "${args[@]}" "$@" >"$log" 2>&1 &
  local pid=$! ready=1
  for _ in $(seq 1 100); do grep -q "ready:" "$log" && { ready=0; break; }; sleep 0.1; done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [[ $ready -eq 0 ]] || { cat "$log"; rm -f "$log"; return 1; }
  grep "memory plan" "$log" | head -1
  rm -f "$log"
}
plan=$(check_starts) || { echo "FAIL: the default context did not start under the limit"; exit 1; }
grep -q "memory plan context [0-9]* positions" <<<"$plan" || { echo "FAIL: no plan line: $plan"; exit 1; }
context=$(sed -E 's/.*memory plan context ([0-9]+) positions.*/\1/' <<<"$plan")
((context < 65536)) || { echo "FAIL: the default context $context did not shrink"; exit 1; }
check_starts --context "$context" >/dev/null || { echo "FAIL: the control (--context $context) did not start"; exit 1; }
echo "ok: refused at 65536; default context $context"
