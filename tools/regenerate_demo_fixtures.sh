#!/usr/bin/env bash
# Regenerates every fixture made from models/demo (the trained demo since issue 20 item 1), on the GPU machine (it
# needs python3 with torch 2.11, transformers 5.17.0, tokenizers, safetensors; everything runs on its CPU, one thread).
# From the repository root:
#
#   tools/regenerate_demo_fixtures.sh OUT
#
# Writes OUT/demo-fixtures.tar.gz (paths relative to the repository root: unpack it there with
# `tar -xzf OUT/demo-fixtures.tar.gz`) and OUT/regenerate.log (this output). The tarball holds:
#   models/demo/joint_head.safetensors, joint_head_config.json      the demo's random joint head (same seed as before)
#   tests/fixtures/decisions/*                                       decision goldens over the demo's transformers rows
#   tests/fixtures/models/tiny-mm-clef/joint_head*                   tiny-mm-clef's head (the same script makes it)
#   tests/fixtures/goldens/demo.fp32.safetensors                     transformers FP32 forward goldens of the demo
#   tools/fixtures.sha256                                            the committed list with those files' lines updated
# Not remade: the MTP golden (tests/fixtures/goldens/demo.mtp.safetensors) takes duet's own rows as its input and
# was made from these same weights (tools/make_mtp_fixtures.py); the tokenizer goldens (same tokenizer files).
# Exits non-zero on the first failure (a hash check, a cross-check of the head, a missing tensor).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 OUT" >&2; exit 2; }
[[ -f tools/make_decision_fixtures.py && -d models/demo ]] || { echo "run from the repository root" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
exec > >(tee "$out/regenerate.log") 2>&1

# The pins of make_fixtures_on_device.sh (the python scripts set them too; here for anything they start).
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES="" MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
began=$SECONDS
step() { echo; echo "=== $1 (at $((SECONDS - began)) s)"; }

step "versions"
python3 -c 'import torch, transformers, tokenizers, safetensors; print("torch", torch.__version__, "transformers",
transformers.__version__, "tokenizers", tokenizers.__version__, "safetensors", safetensors.__version__)'

step "the demo is the trained one (8 layers, MTP layer, a vision tower) and matches tools/fixtures.sha256"
python3 - <<'EOF'
import json
top = json.load(open("models/demo/config.json"))
assert top["architectures"] == ["Qwen3_5ForConditionalGeneration"] and "vision_config" in top, top.keys()
c = top["text_config"]
assert c["num_hidden_layers"] == 8 and c.get("mtp_num_hidden_layers") == 1 and c["hidden_size"] == 128, c
print("models/demo: layers", c["num_hidden_layers"], "hidden", c["hidden_size"], "intermediate",
      c["intermediate_size"], "mtp layers", c["mtp_num_hidden_layers"])
EOF
(cd tests/fixtures && grep -v '/models/demo/' ../../tools/fixtures.sha256 | grep -E ' \./(models/tiny-mm/|tokenizer/qwen35-synthetic/)' \
  | sha256sum -c --quiet -)
grep ' ./models/demo/' tools/fixtures.sha256 | grep -v joint_head | sed 's| \./models/| ./|' | (cd models && sha256sum -c --quiet -)
echo "inputs match"

step "decision goldens and joint heads (tools/make_decision_fixtures.py)"
python3 tools/make_decision_fixtures.py --out "$work/dfx"
cmp -s "$work/dfx/models/demo/joint_head.safetensors" models/demo/joint_head.safetensors \
  && echo "the demo's joint head is byte-equal to the committed one" \
  || echo "note: the demo's joint head differs from the committed one (torch's generator changed?)"

step "transformers FP32 goldens of the demo (tools/make_model_fixtures.py --demo-goldens-only)"
python3 tools/make_model_fixtures.py --out "$work/mfx" --demo-goldens-only models/demo

step "assemble the tarball"
tree=$work/tree
mkdir -p "$tree/models/demo" "$tree/tests/fixtures/decisions" "$tree/tests/fixtures/models/tiny-mm-clef" \
  "$tree/tests/fixtures/goldens" "$tree/tools"
cp "$work/dfx/models/demo/joint_head.safetensors" "$work/dfx/models/demo/joint_head_config.json" "$tree/models/demo/"
cp "$work/dfx/decisions/"* "$tree/tests/fixtures/decisions/"
cp "$work/dfx/models/tiny-mm-clef/joint_head"* "$tree/tests/fixtures/models/tiny-mm-clef/"
cp "$work/mfx/goldens/demo.fp32.safetensors" "$tree/tests/fixtures/goldens/"
# fixtures.sha256: every line of the new files replaces the committed line of the same path, or is added. The model
# files that make_decision_fixtures copies beside tiny-mm-clef's head must keep their committed hashes.
(cd "$work/mfx" && sha256sum ./goldens/demo.fp32.safetensors) >"$work/new.sha256"
cat "$work/dfx/fixtures.sha256" >>"$work/new.sha256"
python3 - "$work/new.sha256" tools/fixtures.sha256 "$tree/tools/fixtures.sha256" <<'EOF'
import sys
new = dict(reversed(line.split()) for line in open(sys.argv[1]))
lines, seen = [], set()
for line in open(sys.argv[2]):
    digest, path = line.split()
    if path in new:
        if path.startswith("./models/tiny-mm-clef/") and "joint_head" not in path and new[path] != digest:
            sys.exit(f"error: {path} changed: tiny-mm-clef's model files are tiny-mm's, copied")
        digest = new[path]
        seen.add(path)
    lines.append(f"{digest}  {path}\n")
lines += [f"{new[p]}  {p}\n" for p in new if p not in seen]
open(sys.argv[3], "w").writelines(lines)
print(f"fixtures.sha256: {len(seen)} lines updated, {len(new) - len(seen)} added")
EOF
(cd "$tree/tests/fixtures" && grep -E ' \./(decisions|goldens/demo\.fp32)' "$tree/tools/fixtures.sha256" | sha256sum -c --quiet -)
# The answers README.md and docs/api.md show for the spec's example request (they are its golden's answers).
python3 - "$tree/tests/fixtures/decisions/demo.json" <<'EOF'
import json, sys
goldens = json.load(open(sys.argv[1]))
# The end-to-end gate (tests/decision/end_to_end_test.cc) is |dp| <= 1e-4 with duet's CPU rows some 5e-5 relative off
# transformers' (on the random demo): a head whose answers move more than that under such noise would fail it there.
moved = goldens["checks"]["max_abs_p_under_5e-05_relative_row_noise"]
print(f"the demo head's answers under 5e-5 relative row noise move by up to {moved:.3g}"
      + (" WARNING: over half the end-to-end gate (1e-4)" if moved > 5e-5 else " (gate 1e-4)"))
case = next(c for c in goldens["cases"] if c["name"] == "spec-example")
print("spec-example answers (for README.md and docs/api.md):",
      json.dumps({"answers": case["answers"], "usage": case["usage"]}, ensure_ascii=False))
EOF
tar -czf "$out/demo-fixtures.tar.gz" -C "$tree" models tests tools
tar -tzvf "$out/demo-fixtures.tar.gz"
step "done in $((SECONDS - began)) s: unpack with tar -xzf $out/demo-fixtures.tar.gz at the repository root"
