#!/usr/bin/env bash
# On the GPU machine: served decode (`duet serve` + `duet bench`, the engine's path, which `duet run` does not take)
# under server settings, alternating, on the 9B-shaped checkpoint that tools/make_9b_references.py wrote (WORK/model).
# Each setting is a set of environment assignments for the server (`-` for none), e.g. steps launched ahead off
# against on (issue 16 item 5):
#   tools/gpu_served_ab.sh OUT /tmp/9b 2 DUET_LOOKAHEAD=0 DUET_LOOKAHEAD=1
# Per round and setting, one server (DUET_STEP_GAPS=1 beside the setting): 1 stream greedy and seeded, 64 streams
# greedy, 256 tokens each; its /metrics' steps and steps launched ahead; and at exit the step gaps' rows at 1 and 64
# (the GPU's idle time between steps on its own clock). Then each setting's mean per level against the first's.
# BENCH_FORMAT in the environment is sent as every request's response_format (`duet bench --response-format`), e.g.
# a JSON schema, for structured outputs' rows launched ahead against not (DUET_LOOKAHEAD_MASKED=0 / 1).
#   usage: tools/gpu_served_ab.sh OUT WORK ROUNDS SETTING...
set -uo pipefail
out=$1; work=$2; rounds=$3; shift 3
mkdir -p "$out"
duet=${DUET:-device/bin/duet}
backend=${BACKEND:-cuda}
port=18090
url=http://127.0.0.1:$port
declare -A total runs
for ((round = 1; round <= rounds; ++round)); do
  for setting in "$@"; do
    assignments=()
    [[ $setting == - ]] || IFS=' ' read -r -a assignments <<<"$setting"
    stem=$out/$round-${setting//[^A-Za-z0-9_.-]/_}
    env "${assignments[@]}" DUET_STEP_GAPS=1 "$duet" serve "$work/model" --backend "$backend" --host 127.0.0.1 --port $port \
      --parallel 64 --context 2048 --max-tokens 256 --queue-limit 256 > "$stem.out" 2> "$stem.log" &
    server=$!
    for _ in $(seq 1 400); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.25; done
    if ! curl -sf "$url/health" >/dev/null; then
      echo "[$setting] the server did not start"; tail -5 "$stem.log"; kill $server 2>/dev/null; wait $server; continue
    fi
    for level in "1 greedy" "1 seeded" "64 greedy"; do
      read -r streams sampling <<<"$level"
      line=$(timeout 120 "$duet" bench --url "$url" --reps 1 --levels "$streams" --tokens 256 --sampling "$sampling" \
        ${BENCH_FORMAT:+--response-format "$BENCH_FORMAT"} 2>&1 | grep -E "^level" | tail -1)
      echo "[round $round] [$setting] [$level] ${line:-FAILED}"
      rate=$(grep -oE '[0-9.]+ tok/s' <<<"$line" | head -1 | tr -dc '0-9.')
      if [[ -n $rate ]]; then
        key="$setting|$level"
        total[$key]=$(awk -v a="${total[$key]:-0}" -v b="$rate" 'BEGIN { print a + b }')
        runs[$key]=$(( ${runs[$key]:-0} + 1 ))
      fi
    done
    echo "[round $round] [$setting] $(curl -sf "$url/metrics" | grep -E '^duet_engine_steps(_ahead)?_total[{ ]' | sed 's/{[^}]*}//' | tr '\n' ' ')"
    kill -TERM $server; wait $server
    sed -n '/^DUET_STEP_GAPS:/,$p' "$stem.log" | grep -E "^ +(rows|1|64) " | sed "s/^/[round $round] [$setting] /"
  done
done
echo "== means (tok/s, the bench's first rate) against the first setting"
for level in "1 greedy" "1 seeded" "64 greedy"; do
  base_key="$1|$level"
  [[ -n ${runs[$base_key]:-} ]] || continue
  base=$(awk -v t="${total[$base_key]}" -v n="${runs[$base_key]}" 'BEGIN { print t / n }')
  for setting in "$@"; do
    key="$setting|$level"
    [[ -n ${runs[$key]:-} ]] || continue
    awk -v t="${total[$key]}" -v n="${runs[$key]}" -v b="$base" -v s="$setting" -v l="$level" \
      'BEGIN { m = t / n; printf "[%s] [%s] %.1f tok/s over %d run(s), %+.2f%%\n", l, s, m, n, (m / b - 1) * 100 }'
  done
done
