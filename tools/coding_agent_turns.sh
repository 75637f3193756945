#!/usr/bin/env bash
# Claude Code (the npm package pinned in tests/package.json; scripts/test-deps.sh installs it) for three turns of one
# conversation against `duet serve` on the demo model: `-p` for the first turn, `-c -p` (continue the latest
# conversation) for the next two. Prints each Messages request the server answered: prompt tokens, tokens resumed
# from the prompt cache, prefill and total seconds (from the access log). A benchmark with receipts in
# docs/benchmarks.md (issue 18: the second and third turns must report cached tokens), not a test: the first turn's
# ~17K-token prefill takes about a minute on the CPU.
#   usage: tools/coding_agent_turns.sh [DUET=build/src/cli/duet] [MODEL=models/demo] [extra duet serve flags...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
duet=${1:-$repo/build/src/cli/duet}
model=${2:-$repo/models/demo}
shift $(( $# > 2 ? 2 : $# ))
agent=$repo/tests/node_modules/@anthropic-ai/claude-code-linux-x64/claude
[[ -x $agent ]] || { echo "coding_agent_turns: $agent is missing: run scripts/test-deps.sh" >&2; exit 1; }
work=$(mktemp -d)
server=""
trap '[[ -z $server ]] || kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/home" "$work/project"
: > "$work/serve.out"  # before the background job opens it: the loop below may read first (tests/bench_server.sh)
"$duet" serve "$model" --port 0 --context 18944 "$@" > "$work/serve.out" 2> "$work/serve.log" &
server=$!
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/serve.out")
  [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
  kill -0 "$server" 2> /dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.2
done
turn() {  # $1: the turn's number; the rest: Claude Code's arguments
  local n=$1 start
  shift
  start=$(date +%s.%N)
  (cd "$work/project" && env -i PATH=/usr/bin:/bin HOME="$work/home" ANTHROPIC_BASE_URL="http://127.0.0.1:$port" \
    ANTHROPIC_API_KEY=sk-duet-bench DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    DISABLE_AUTOUPDATER=1 timeout 900 "$agent" "$@" --model demo > "$work/turn$n.txt" 2>&1) || {
    echo "turn $n: Claude Code exited $?:"; cat "$work/turn$n.txt"; exit 1; }
  echo "turn $n: Claude Code ran $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start}") s; its answer's last line: $(tail -n 1 "$work/turn$n.txt" | head -c 160)"
}
turn 1 -p 'Say hello.'
turn 2 -c -p 'Say it again, shorter.'
turn 3 -c -p 'Thanks. One word now.'
echo "Messages requests the server answered (access log fields):"
grep 'route="/v1/messages"' "$work/serve.log" |
  grep -o 'status=[0-9]*\|total_s=[0-9.]*\|prompt_tokens=[0-9]*\|completion_tokens=[0-9]*\|cached_tokens=[0-9]*\|prefill_s=[0-9.]*\|ttft_s=[0-9.]*' |
  awk -F= '$1 == "status" && NR > 1 {print line; line = ""} {line = line "  " $0} END {print line}'
