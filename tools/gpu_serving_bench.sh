#!/usr/bin/env bash
# On the GPU machine, after tools/gpu_decision_gate.sh made WORK/clef-flash (the random 9B-shaped checkpoint with a
# random joint head): the serving figures that issues 18 and 19 ask for, against one `duet serve --backend cuda`:
#   1. decisions about one state (`duet bench --decisions --same-state`), 1K and 8K tokens: the first decision, then
#      the later ones resumed from the prompt cache (issue 18's target: the 2nd..Nth about an 8K state under 30 ms p50);
#   2. a coding agent's conversation (`duet bench --multi-turn`, a 20,000-token system prompt, 3 turns): time to first
#      token of the turns after the first (issue 18's target: under 60 ms);
#   3. decode with and without a JSON schema (`duet bench --response-format`) at 1 and 64 streams (issue 19's target:
#      a schema costs under 3%).
# Each stage is bounded; a stage that fails says so and the next runs. About 4 minutes.
#   usage: tools/gpu_serving_bench.sh OUT [WORK=/tmp/9b]
#   environment: DUET (default device/bin/duet), BENCH_BACKEND (cuda; cpu runs it here on a WORK/clef-flash that
#   links models/demo, a smoke test of the script), BENCH_PORT (18092)
set -uo pipefail
out=$1; work=${2:-/tmp/9b}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=${DUET:-device/bin/duet}
port=${BENCH_PORT:-18092}
url=http://127.0.0.1:$port
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }
[[ -f $work/clef-flash/config.json ]] || { echo "no $work/clef-flash: run tools/gpu_decision_gate.sh first"; exit 1; }

stamp "duet serve $work/clef-flash (log: $out/serve.log)"
$duet serve "$work/clef-flash" --backend "${BENCH_BACKEND:-cuda}" --host 127.0.0.1 --port "$port" --parallel 64 --context 24576 \
  --kv-cache-tokens 262144 --served-model-name clef-flash > "$out/serve.out" 2> "$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 400); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.5; done
curl -sf "$url/health" >/dev/null || { stamp "the server did not start"; tail -20 "$out/serve.log"; exit 1; }
grep -m1 "memory plan" "$out/serve.log"

stamp "1. decisions about one state"
timeout 150 $duet bench --url "$url" --decisions --same-state --decision-lengths 1000,8000 --decision-concurrency 4 \
  --reps 2 2>&1 | tee "$out/same_state.log" | grep -v '^  '
stamp "exit ${PIPESTATUS[0]}"

stamp "2. a coding agent's conversation"
timeout 120 $duet bench --url "$url" --multi-turn --turns 3 --system-tokens 20000 --reply-tokens 32 2>&1 |
  tee "$out/multi_turn.log"
stamp "exit ${PIPESTATUS[0]}"

stamp "3. decode with and without a schema"
schema='{"type":"json_schema","json_schema":{"name":"notes","schema":{"type":"object","properties":{"title":{"type":
"string"},"notes":{"type":"array","items":{"type":"string"}}},"required":["title","notes"],"additionalProperties":false}}}'
for round in 1 2; do
  for format in "" "$schema"; do
    timeout 60 $duet bench --url "$url" --levels 1,64 --tokens 64 --reps 1 --sampling greedy \
      ${format:+--response-format "$format"} 2>&1 | grep '^level' | sed "s/^/round $round ${format:+schema }/" |
      tee -a "$out/schema.log"
  done
done
curl -s "$url/metrics" | grep -E '^duet_grammar_mask|^duet_prompt_cache_(hits|misses|tokens)' | tee "$out/metrics.txt"
kill "$server" 2>/dev/null || true
stamp "done"
