#!/usr/bin/env bash
# `duet run --streams S` decodes one prompt as S sequences together (the batched decode step of a server): each
# stream's ids must equal those of the prompt run alone, which `duet run` itself checks across streams and this test
# checks against the single-stream run, on the demo (trained, with its `mtp.*` tensors beside the main model's). With
# --ignore-eos every stream gives all 24 ids even though the demo ends its turns. As the planted control, a run whose
# streams could not agree (the alone run with another prompt) must differ from the streams' ids.
#   usage: run_streams_test.sh DUET_BINARY MODELS_DIR
set -euo pipefail
duet=$1 models=$2
prompt=11,22,33,44,55,66,77
args=(--backend cpu --max-tokens 24 --ignore-eos --chunk 3)
alone=$("$duet" run "$models/demo" --prompt-ids "$prompt" "${args[@]}" 2>/dev/null)
together=$("$duet" run "$models/demo" --prompt-ids "$prompt" "${args[@]}" --streams 5 2>/dev/null)
[[ $(tr ',' '\n' <<<"$alone" | wc -l) -eq 24 ]] || { echo "FAIL: alone gave '$alone', not 24 ids"; exit 1; }
[[ $alone == "$together" ]] || { echo "FAIL: 5 streams gave $together, alone $alone"; exit 1; }
other=$("$duet" run "$models/demo" --prompt-ids 11,22,33,44,55,66,78 "${args[@]}" 2>/dev/null)
[[ $other != "$together" ]] || { echo "FAIL: the control (another prompt) gave the same ids"; exit 1; }
echo "ok: $together"
