#!/usr/bin/env bash
# On the GPU machine, in one device call (about 4-6 minutes; bounded at GATE_BUDGET_S, default 510 s): the decisions
# gate of design/targets.md on the Qwen3.5-9B shape. tools/decision_gate_9b.py `reference` makes (or reuses) the
# random 9B-shaped checkpoint of make_9b_references.py in WORK/model, writes WORK/clef-flash (that checkpoint by
# symlinks + a random joint head of the Clef-Flash shape, made decisive by default: tools/decisive_head.py), builds
# decision requests in the four length buckets and runs them through transformers BF16 + the fp32 reference head;
# then `duet serve WORK/clef-flash --backend cuda`
# answers the same requests alone and 4 at a time, and `duet` compares them (mean KL, top option, latency per bucket,
# byte equality at 4 at once, planted controls). Run from the repository root after unpacking the build
# (tools/pack_for_device.sh); OUT gets decision_gate.json, decision_gate.log and the logs of each stage.
#   usage: tools/gpu_decision_gate.sh OUT [WORK=/tmp/9b] [--per-bucket N] [--fp32-floor] [decision_gate_9b.py flags]
#   environment: GATE_BUDGET_S (510), DGATE_PORT (18091), DUET_SERVE_FLAGS (more `duet serve` flags, e.g.
#   "--prefill-chunk 1024")
# --fp32-floor adds transformers FP32 + head as a second reference, and the fidelity bar is then the relative one of
# issue 17 (duet no worse than transformers BF16 against it); without it, the absolute bars, which a random head fails
# for any BF16 engine. The FP32 pass stops 120 s before the reference stage's own deadline (the budget less the duet
# phase's reserve), so give it GATE_BUDGET_S of about 450 or more: at 250 (session 31) it stopped before any request.
set -euo pipefail
out=$1; shift
work=/tmp/9b
if [ $# -gt 0 ] && [[ $1 != --* ]]; then work=$1; shift; fi
extra=("$@")
port=${DGATE_PORT:-18091}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$(date +%s)
deadline=$(( start + ${GATE_BUDGET_S:-510} ))
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }

stamp "reference: checkpoint, head, requests, transformers BF16 + reference head (log: $out/reference.log)"
set +e
python3 tools/decision_gate_9b.py reference --work "$work" --deadline "$deadline" "${extra[@]}" \
  2> "$out/reference.stderr" | tee "$out/reference.log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  stamp "reference failed (exit $rc); last lines of $out/reference.stderr:"
  tail -30 "$out/reference.stderr"
  exit "$rc"
fi
grep -v -i 'warn' "$out/reference.stderr" | tail -5 || true

stamp "duet serve $work/clef-flash on port $port (log: $out/serve.log)"
# shellcheck disable=SC2086  # DUET_SERVE_FLAGS: split into words on purpose
device/bin/duet serve "$work/clef-flash" --backend cuda --host 127.0.0.1 --port "$port" --parallel 16 --context 17000 \
  --served-model-name clef-flash ${DUET_SERVE_FLAGS:-} > "$out/serve.out" 2> "$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT

set +e
python3 tools/decision_gate_9b.py duet --work "$work" --out "$out" --url "http://127.0.0.1:$port" \
  --server-pid "$server" --deadline "$deadline" "${extra[@]}" 2> "$out/duet_phase.stderr" | tee "$out/duet_phase.log"
rc=${PIPESTATUS[0]}
set -e
[ -s "$out/duet_phase.stderr" ] && tail -20 "$out/duet_phase.stderr"
kill "$server" 2>/dev/null || true
for _ in $(seq 1 20); do kill -0 "$server" 2>/dev/null || break; sleep 0.5; done
stamp "done (exit $rc); duet serve's last log lines:"
tail -5 "$out/serve.log"
exit "$rc"
