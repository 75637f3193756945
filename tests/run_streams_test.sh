#!/usr/bin/env bash
# `duet run --streams S` decodes one prompt as S sequences together (the batched decode step of a server): each
# stream's ids must equal those of the prompt run alone, which `duet run` itself checks across streams and this test
# checks against the single-stream run. Then the trained demo (models/trained-demo, with its `mtp.*` tensors) loads
# and decodes. As the planted control, a run whose streams could not agree (the alone run with another prompt) must
# differ from the streams' ids.
#   usage: run_streams_test.sh DUET_BINARY MODELS_DIR
set -euo pipefail
duet=$1 models=$2
prompt=11,22,33,44,55,66,77
args=(--backend cpu --max-tokens 24 --ignore-eos --chunk 3)
alone=$("$duet" run "$models/demo" --prompt-ids "$prompt" "${args[@]}" 2>/dev/null)
together=$("$duet" run "$models/demo" --prompt-ids "$prompt" "${args[@]}" --streams 5 2>/dev/null)
[[ -n $alone && $alone == "$together" ]] || { echo "FAIL: 5 streams gave $together, alone $alone"; exit 1; }
other=$("$duet" run "$models/demo" --prompt-ids 11,22,33,44,55,66,78 "${args[@]}" 2>/dev/null)
[[ $other != "$together" ]] || { echo "FAIL: the control (another prompt) gave the same ids"; exit 1; }
trained=$("$duet" run "$models/trained-demo" --prompt-ids "$prompt" "${args[@]}" --streams 2 2>/dev/null)
[[ $(tr ',' '\n' <<<"$trained" | wc -l) -eq 24 ]] || { echo "FAIL: the trained demo gave '$trained'"; exit 1; }
echo "ok: $together"
