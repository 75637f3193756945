#!/usr/bin/env bash
# On the GPU machine: the runtime adapter's gate of design/targets.md on the Qwen3.5-9B shape (issue 9). Stages, run in
# the order given, each reusing what an earlier call left in WORK (the machine keeps /tmp while it stays warm):
#   make       WORK/model: the random 9B-shaped base (make_9b_references.py --checkpoint-only), when absent;
#              WORK-merged/model: base + a planted rank-128 difference in all 248 projections, F32 norms rounded
#              (make_9b_merged.py), when absent. With PLANTED_ADAPTER=1: a rank-PLANTED_RANK (256, the spec's rank)
#              difference instead, and its factors written as the adapter's factors and manifest in
#              WORK-merged/planted-adapter (make_9b_merged.py --adapter-out: B A = the planted difference, in_proj_a /
#              in_proj_b at full rank 32; no SVD); a merged checkpoint without that folder (or of another rank) is
#              made again, and then reference must run again
#   reference  decision_gate_9b.py reference on the MERGED checkpoint: WORK-merged/clef-flash (merged + the gate's
#              random Clef-Flash head) and transformers BF16 + the fp32 reference head per request
#   extract    `duet adapter --merged WORK-merged/clef-flash --base WORK/model --out WORK/clef-adapter` (rank 256),
#              timed: the tool's time on the 9B shape (390 s); its report in OUT/adapter.log
#   planted    instead of extract (after `PLANTED_ADAPTER=1 ... make` and reference): WORK/clef-adapter = the planted
#              factors of WORK-merged/planted-adapter + the gate's head of WORK-merged/clef-flash, signed
#              (tools/adapter_folder.py finish): the same folder format `duet adapter` writes, in seconds
#   merged     `duet serve WORK-merged/clef-flash` (the merged checkpoint alone) through decision_gate_9b.py duet
#   adapter    `duet serve WORK/model --clef WORK/clef-adapter` (stock base + runtime adapter), the same requests
#   base       control: `duet serve` of the base with the same head and no adapter; must FAIL the gate
#   compare    tools/adapter_gate_compare.py: adapter answers against the merged checkpoint's answers (mean KL, top
#              option, latency ratio per bucket), and against transformers
#   chat       `duet bench` chat speed of the base served without and with --clef (1 and 16 streams)
# OUT/<stage>/ gets each stage's logs and reports.
#   usage: tools/gpu_adapter_gate.sh OUT WORK STAGE...      e.g. tools/gpu_adapter_gate.sh /tmp/out /tmp/9b make reference
#   the latency ratio without the SVD: PLANTED_ADAPTER=1 tools/gpu_adapter_gate.sh OUT WORK make reference planted
#   merged adapter base compare (OUT/adapter_gate.log: the gate and the latency ratio per bucket)
#   environment: PER_BUCKET (6), REFERENCE_BUDGET_S (300), REFERENCE_FLAGS (more decision_gate_9b.py reference flags,
#   e.g. "--fp32-floor" or "--head-style plain"), GATE_BUDGET_S per duet phase (240), DGATE_PORT (18091),
#   PLANTED_ADAPTER (0; 1: see make), PLANTED_RANK (256)
set -euo pipefail
out=$1 work=$2; shift 2
merged_work="$work-merged"
per_bucket=${PER_BUCKET:-6}
port=${DGATE_PORT:-18091}
duet=device/bin/duet
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }

# duet_phase NAME MODEL [serve flags...]: serve MODEL and drive the gate's requests through it into OUT/NAME.
duet_phase() {
  local name=$1 model=$2; shift 2
  mkdir -p "$out/$name"
  stamp "$name: duet serve $model $* (log: $out/$name/serve.log)"
  "$duet" serve "$model" "$@" --backend cuda --host 127.0.0.1 --port "$port" --parallel 16 --context 17000 \
    --served-model-name clef-flash > "$out/$name/serve.out" 2> "$out/$name/serve.log" &
  local server=$!
  local deadline=$(( $(date +%s) + ${GATE_BUDGET_S:-240} ))
  set +e
  python3 tools/decision_gate_9b.py duet --work "$merged_work" --out "$out/$name" --url "http://127.0.0.1:$port" \
    --server-pid "$server" --deadline "$deadline" --per-bucket "$per_bucket" 2> "$out/$name/duet_phase.stderr" \
    > "$out/$name/duet_phase.log"
  local rc=$?
  set -e
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  grep -E "gate|KL|top option|p50|PASS|FAIL" "$out/$name/decision_gate.log" 2>/dev/null | head -30 || true
  [ -s "$out/$name/duet_phase.stderr" ] && tail -5 "$out/$name/duet_phase.stderr"
  stamp "$name: gate exit $rc; serve log: $(grep -E 'runtime adapter|memory plan' "$out/$name/serve.log" | head -2)"
}

for stage in "$@"; do
  case $stage in
    make)
      if [ ! -e "$work/model/model.safetensors.index.json" ]; then
        stamp "make: base checkpoint $work/model"
        python3 tools/make_9b_references.py --out "$work" --checkpoint-only > "$out/make_base.log" 2>&1
      fi
      merged_flags=()
      if [ "${PLANTED_ADAPTER:-0}" = 1 ]; then
        merged_flags=(--rank "${PLANTED_RANK:-256}" --adapter-out "$merged_work/planted-adapter")
        # The factors must be those of this merge: without them (or of another rank), make both again.
        if [ "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["rank"])' \
                 "$merged_work/planted-adapter/manifest.json" 2>/dev/null)" != "${PLANTED_RANK:-256}" ]; then
          rm -rf "$merged_work/model" "$merged_work/planted-adapter"
        fi
      fi
      if [ ! -e "$merged_work/model/model.safetensors.index.json" ]; then
        stamp "make: merged checkpoint $merged_work/model ${merged_flags[*]}"
        rm -rf "$merged_work/planted-adapter"  # make_9b_merged.py writes the adapter into a new folder only
        python3 tools/make_9b_merged.py --base "$work/model" --out "$merged_work/model" "${merged_flags[@]}" 2>&1 \
          | tee "$out/make_merged.log"
      fi
      ;;
    reference)
      stamp "reference on the merged checkpoint (log: $out/reference.log)"
      # shellcheck disable=SC2086  # REFERENCE_FLAGS: split into words on purpose (e.g. "--fp32-floor")
      python3 tools/decision_gate_9b.py reference --work "$merged_work" --per-bucket "$per_bucket" --duet-reserve 0 \
        ${REFERENCE_FLAGS:-} \
        --deadline $(( $(date +%s) + ${REFERENCE_BUDGET_S:-300} )) 2> "$out/reference.stderr" > "$out/reference.log" \
        || { tail -20 "$out/reference.stderr"; exit 1; }
      tail -3 "$out/reference.log"
      ;;
    extract)
      rm -rf "$work/clef-adapter"
      stamp "extract: duet adapter (log: $out/adapter.log)"
      began=$(date +%s)
      "$duet" adapter --merged "$merged_work/clef-flash" --base "$work/model" --out "$work/clef-adapter" \
        > "$out/adapter.log" 2>&1 || { tail -30 "$out/adapter.log"; exit 1; }
      tail -8 "$out/adapter.log"
      stamp "extract: duet adapter took $(( $(date +%s) - began )) s on $(nproc) cores"
      ;;
    planted)
      [ -e "$merged_work/planted-adapter/manifest.json" ] ||
        { echo "planted: no $merged_work/planted-adapter: run PLANTED_ADAPTER=1 ... make first" >&2; exit 1; }
      rm -rf "$work/clef-adapter"
      python3 tools/adapter_folder.py finish "$merged_work/planted-adapter" --head-from "$merged_work/clef-flash" \
        --out "$work/clef-adapter"
      grep -E "^adapter " "$out/make_merged.log" 2>/dev/null | head -1 || true
      stamp "planted: $work/clef-adapter"
      ;;
    merged) duet_phase merged "$merged_work/clef-flash" ;;
    adapter) duet_phase adapter "$work/model" --clef "$work/clef-adapter" ;;
    base)
      # The base with the gate's head (the head files of the merged folder) and no adapter: the planted control.
      rm -rf "$work/base-flash" && mkdir -p "$work/base-flash"
      for f in "$work"/model/*; do ln -s "$f" "$work/base-flash/"; done
      cp "$merged_work"/clef-flash/joint_head.safetensors "$merged_work"/clef-flash/joint_head_config.json \
        "$work/base-flash/"
      duet_phase base "$work/base-flash"
      ;;
    compare)
      python3 tools/adapter_gate_compare.py --merged "$out/merged" --adapter "$out/adapter" --base "$out/base" \
        --reference "$merged_work/dgate/reference.json" --out "$out/adapter_gate.json" | tee "$out/adapter_gate.log"
      ;;
    chat)
      for name in without with; do
        flags=()
        [ $name = with ] && flags=(--clef "$work/clef-adapter")
        mkdir -p "$out/chat-$name"
        "$duet" serve "$work/model" "${flags[@]}" --backend cuda --port 18080 --parallel 16 --context 2048 \
          --max-tokens 256 > "$out/chat-$name/serve.out" 2> "$out/chat-$name/serve.log" &
        server=$!
        for _ in $(seq 1 240); do curl -sf http://127.0.0.1:18080/health >/dev/null && break; sleep 0.5; done
        "$duet" bench --url http://127.0.0.1:18080 --levels 1,16 --tokens 64 --reps 2 --sampling greedy \
          > "$out/chat-$name/bench.log" 2>&1 || true
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        stamp "chat $name --clef:"
        grep -v '^request ' "$out/chat-$name/bench.log" | tail -8
      done
      ;;
    *) echo "gpu_adapter_gate: unknown stage $stage" >&2; exit 2 ;;
  esac
done
stamp "done"
