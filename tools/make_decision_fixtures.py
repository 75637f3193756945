#!/usr/bin/env python3
"""Builds tiny random Clef joint schema heads beside the committed tiny Qwen3.5 models, and the decision goldens.

Run on the GPU machine from the repository root (transformers 5.17.0, tokenizers 0.23.2, torch 2.11). Everything
runs on the CPU in one thread with the pins of make_fixtures_on_device.sh (about a minute on the CPU):

    python3 tools/make_decision_fixtures.py --out OUT

Reads, and first checks against tools/fixtures.sha256 (goldens of other models would be meaningless):
  models/demo (its own tokenizer.json), tests/fixtures/models/tiny-mm, tests/fixtures/tokenizer/qwen35-synthetic.
Writes, under OUT:
  models/demo/            the demo model plus joint_head.safetensors and joint_head_config.json (release layout, BF16)
  models/tiny-mm-clef/    a copy of tiny-mm (Qwen3_5ForConditionalGeneration, sharded, like Clef-Flash) plus a head
                          of another shape (1 routing layer, 3 decoder layers, 2 heads)
  decisions/demo.json     every request: raw body, token budget, expected refusal or ids and spans (demo tokenizer;
                          also the ids through qwen35-synthetic, whose added tokens sit at Qwen3.5's real ids), and
                          per question logits, probabilities, prior and joint terms from an independent fp32 head run
                          over transformers' fp32 final-norm rows, with the answers as the spec rounds them
  decisions/demo.rows.safetensors         those final-norm rows for the shorter requests (the head-on-rows test)
  decisions/tiny-mm-clef.json, tiny-mm-clef.rows.safetensors   id-level requests (tiny-mm has no tokenizer)
  fixtures.sha256         the sha256 of every file written, in the form of tools/fixtures.sha256
Exits 1 (after writing) if the cross-checks disagree: the op-by-op head against the torch.nn one, fp32 against fp64.
"""
import os

# The pins of make_fixtures_on_device.sh, set before torch loads so that they take effect.
for _key, _value in (("CUDA_VISIBLE_DEVICES", ""), ("MKL_CBWR", "COMPATIBLE"), ("ATEN_CPU_CAPABILITY", "avx2"),
                     ("ONEDNN_MAX_CPU_ISA", "AVX2"), ("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
                     ("PYTHONUNBUFFERED", "1")):
    os.environ[_key] = _value

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decision_cases  # noqa: E402
import decision_reference as ref  # noqa: E402

DEMO_HEAD = {"hidden_size": 128, "width": 64, "routing_layers": 2, "layers": 4, "heads": 4, "feedforward": 128}
# Demo's scalars keep its answers spread out and its gain from row error low (the end-to-end gate is |dp| <= 1e-4 with
# duet's rows ~5e-5 off transformers'); tiny-mm's exceed ln 100 so that both clamps are live there (saturated answers:
# that head is for the head-on-rows and loading tests, compared on logits as much as on probabilities).
DEMO_SCALARS = {"prior_logit_scale": 2.0, "joint_logit_scale": 2.0, "residual_gate": 1.0}
TINY_HEAD = {"hidden_size": 64, "width": 32, "routing_layers": 1, "layers": 3, "heads": 2, "feedforward": 64}
TINY_SCALARS = {"prior_logit_scale": 4.75, "joint_logit_scale": 4.7, "residual_gate": -0.7}
# Longer prompts are encoded only (CPU time). 64 questions or 255 options take ~5,900 tokens with the demo's small
# vocabulary, within the demo's 65,536 positions.
FORWARD_LIMIT = 8192
BF16_LIMIT = 2048  # the bf16 comparison (informative only) skips longer prompts: CPU bf16 is slow
ROWS_LIMIT = 600  # rows are kept for requests up to this length, up to ROWS_BUDGET rows in all
ROWS_BUDGET = 4000
PERTURBATION = 5e-5  # relative; duet's CPU rows stay within 5.4e-5 of transformers' (tools/README.md)
TOLERANCE = 1e-5


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_inputs(repo):
    """The committed fixtures must be the ones tools/fixtures.sha256 lists."""
    where = {"./models/demo/": "models/demo/", "./models/tiny-mm/": "tests/fixtures/models/tiny-mm/",
             "./tokenizer/qwen35-synthetic/": "tests/fixtures/tokenizer/qwen35-synthetic/"}
    checked = 0
    for line in open(os.path.join(repo, "tools", "fixtures.sha256")):
        digest, listed = line.split()
        for prefix, folder in where.items():
            if listed.startswith(prefix):
                path = os.path.join(repo, folder, listed[len(prefix):])
                if sha256(path) != digest:
                    sys.exit(f"error: {path}: sha256 differs from tools/fixtures.sha256; regenerate in order")
                checked += 1
    print(f"inputs: {checked} files match tools/fixtures.sha256")


def random_head(cfg, scalars, generator):
    """Random weights at a scale where every path matters, stored BF16 as the release is."""
    tensors = {}
    for name, shape in ref.head_shapes(cfg).items():
        if name in scalars:
            value = torch.tensor(scalars[name])
        elif re.search(r"norm\d?\.weight$", name):
            value = 1.0 + 0.2 * torch.randn(shape, generator=generator)
        elif re.search(r"norm\d?\.bias$", name):
            value = 0.1 * torch.randn(shape, generator=generator)
        elif name == "type_embedding.weight":
            value = 0.5 * torch.randn(shape, generator=generator)
        elif len(shape) == 2:
            value = torch.randn(shape, generator=generator) / math.sqrt(shape[1])
        else:
            value = 0.1 * torch.randn(shape, generator=generator)
        tensors[name] = value.to(torch.bfloat16).contiguous()
    return tensors


def make_decision_model(source, folder, cfg, scalars, generator, tensors=None):
    """Copies a model folder and writes a head beside it: random_head's, or `tensors` when given (BF16, the spec's
    names and shapes: a head made otherwise, such as tools/decisive_head.py's); returns the head read back as fp32."""
    shutil.copytree(source, folder, dirs_exist_ok=True)
    text = json.load(open(os.path.join(source, "config.json")))
    hidden = text.get("text_config", text)["hidden_size"]
    assert hidden == cfg["hidden_size"], (source, hidden, cfg)
    if tensors is None:
        tensors = random_head(cfg, scalars, generator)
    save_file(tensors, os.path.join(folder, "joint_head.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "joint_head_config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    weights = {k: v.float() for k, v in load_file(os.path.join(folder, "joint_head.safetensors")).items()}
    shapes = ref.head_shapes(cfg)
    assert {k: list(v.shape) for k, v in weights.items()} == shapes, "written head differs from the spec's names"
    module = ref.ModuleHead(cfg).eval()
    module.load_state_dict(weights, strict=True)  # every name and shape is a torch module's
    print(f"{folder}: head of {sum(v.numel() for v in weights.values()):,} parameters, config {cfg}")
    return weights, module


class Backbone:
    """transformers' model on the CPU; rows(ids) returns the final-norm rows (the head's H)."""

    def __init__(self, folder, dtype):
        arch = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
        self.model, info = getattr(transformers, arch).from_pretrained(folder, dtype=dtype, attn_implementation="eager",
                                                                       output_loading_info=True)
        self.model.eval()
        # A tensor missing from the file would be left at transformers' random init and the goldens would be of
        # another model. Unexpected ones are expected: the trained demo's MTP layer (mtp.*), which this class lacks.
        if info.get("missing_keys"):
            sys.exit(f"error: {folder}: transformers finds tensors missing: {sorted(info['missing_keys'])[:8]}")
        unexpected = sorted(info.get("unexpected_keys", []))
        if any(not k.startswith("mtp.") for k in unexpected):
            sys.exit(f"error: {folder}: tensors transformers does not know: {unexpected[:8]}")
        print(f"{folder} ({dtype}): {len(unexpected)} mtp.* tensors left out (the MTP layer is not the head's input)")
        inner = self.model.model
        norm = inner.language_model.norm if hasattr(inner, "language_model") else inner.norm
        self.captured = []
        norm.register_forward_hook(lambda module, args, out: self.captured.append(out.detach().float()))
        self.lm_head = self.model.get_output_embeddings().weight.detach().float()

    def rows(self, ids):
        self.captured.clear()
        with torch.no_grad():
            self.model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
        assert len(self.captured) == 1 and self.captured[0].shape[1] == len(ids)
        return self.captured[0][0].clone()


class Checks:
    """Worst disagreements over all requests; the goldens are trusted only if the first two are small."""

    def __init__(self):
        self.module_logit = self.fp64_prob = self.sensitivity = 0.0
        self.kl, self.top_equal, self.questions = [], 0, 0
        self.min_max_p, self.max_max_p, self.entropy = 1.0, 0.0, []
        self.min_top_gap = 1.0  # the closest race between the first and second option: ties would make flaky gates

    def update(self, weights, module, cfg, rows, lm_head, ids, encoding, out, generator, rows_bf16=None):
        with torch.no_grad():
            other = module(rows, lm_head, ids, encoding)
        wide = ref.head_forward(weights, cfg, rows.double(), lm_head.double(), ids, encoding, dtype=torch.float64)
        noisy_rows = rows * (1 + PERTURBATION * torch.randn(rows.shape, generator=generator))
        noisy = ref.head_forward(weights, cfg, noisy_rows, lm_head, ids, encoding)
        low = ref.head_forward(weights, cfg, rows_bf16, lm_head, ids, encoding) if rows_bf16 is not None else None
        for i, q in enumerate(out):
            p = q["probabilities"]
            self.module_logit = max(self.module_logit, float((other[i] - q["logits"]).abs().max()))
            self.fp64_prob = max(self.fp64_prob, float((wide[i]["probabilities"] - p.double()).abs().max()))
            self.sensitivity = max(self.sensitivity, float((noisy[i]["probabilities"] - p).abs().max()))
            self.min_max_p, self.max_max_p = min(self.min_max_p, float(p.max())), max(self.max_max_p, float(p.max()))
            if len(p) > 1:
                self.min_top_gap = min(self.min_top_gap, float(p.topk(2).values[0] - p.topk(2).values[1]))
            self.entropy.append(float(-(p * p.clamp_min(1e-30).log()).sum() / math.log(len(p))))
            self.questions += 1
            if low is not None:
                lp = low[i]["probabilities"]
                self.kl.append(float((p * (p.clamp_min(1e-30).log() - lp.clamp_min(1e-30).log())).sum()))
                self.top_equal += int(int(p.argmax()) == int(lp.argmax()))

    def summary(self):
        out = {"module_vs_op_by_op_max_abs_logit": self.module_logit, "fp32_vs_fp64_max_abs_p": self.fp64_prob,
               f"max_abs_p_under_{PERTURBATION:g}_relative_row_noise": self.sensitivity,
               "questions": self.questions, "min_top_gap": self.min_top_gap,
               "max_p_range": [self.min_max_p, self.max_max_p],
               "mean_normalized_entropy": sum(self.entropy) / max(1, len(self.entropy))}
        if self.kl:
            out["bf16_backbone_mean_kl"] = sum(self.kl) / len(self.kl)
            out["bf16_backbone_top_agreement"] = self.top_equal / len(self.kl)
        return out

    def ok(self):
        return self.module_logit <= TOLERANCE * 10 and self.fp64_prob <= TOLERANCE


def floats(t):
    return [float(x) for x in t.tolist()]


def results_of(encoding, out):
    return [{"id": q["id"], "logits": floats(o["logits"]), "probabilities": floats(o["probabilities"]),
             "prior": floats(o["prior"]), "joint": floats(o["joint"])} for q, o in zip(encoding["questions"], out)]


def resolve_budget(budget, tokenize, request):
    if budget == "default":
        return ref.REFERENCE_MAX_LENGTH
    probe = ref.encode(tokenize, request, max_length=1 << 40)
    fixed, total = probe["fixed_tokens"], probe["input_tokens"]
    relative = {"fit": total, "fit-1": total - 1, "fixed-1": fixed - 1}
    if budget in relative:
        return relative[budget]
    match = re.fullmatch(r"fixed\+(\d+)", budget)
    assert match, budget
    return fixed + int(match.group(1))


def demo_goldens(repo, weights, module, generator, rng):
    demo_dir = os.path.join(repo, "models", "demo")
    demo_tok = tokenizers.Tokenizer.from_file(os.path.join(demo_dir, "tokenizer.json"))
    q35_tok = tokenizers.Tokenizer.from_file(
        os.path.join(repo, "tests", "fixtures", "tokenizer", "qwen35-synthetic", "tokenizer.json"))

    def tokenize_demo(text):
        return demo_tok.encode(text, add_special_tokens=False).ids

    def tokenize_q35(text):
        return q35_tok.encode(text, add_special_tokens=False).ids

    start = time.perf_counter()
    backbone = Backbone(demo_dir, torch.float32)
    backbone_bf16 = Backbone(demo_dir, torch.bfloat16)
    print(f"demo backbone loaded (fp32, bf16) in {time.perf_counter() - start:.1f} s")
    checks, cases, rows_kept, forward_s = Checks(), [], {}, 0.0
    hf_auto = auto_tokenizer(demo_dir)
    auto_differs = []
    for case in decision_cases.demo_cases(rng):
        request = json.loads(case["body"])
        max_length = resolve_budget(case["budget"], tokenize_demo, request)
        record = {"name": case["name"], "notes": case["notes"], "body": case["body"], "max_length": max_length,
                  "truncation": request.get("truncation")}
        try:
            encoding = ref.encode(tokenize_demo, request, max_length, request.get("truncation"))
        except ref.Refused as refused:
            record.update(expect=refused.code, counts=refused.counts)
            try:
                ref.encode(tokenize_q35, request, max_length, request.get("truncation"))
                raise AssertionError(f"{case['name']}: qwen35-synthetic accepts what the demo tokenizer refuses")
            except ref.Refused as other:
                assert other.code == refused.code and other.counts == refused.counts, (refused.counts, other.counts)
            cases.append(record)
            print(f"  {case['name']}: refused {refused.code} {refused.counts}")
            continue
        q35 = ref.encode(tokenize_q35, request, max_length, request.get("truncation"))
        record.update(expect="ok", encoding=encoding, qwen35_ids=q35["ids"])
        if q35["questions"] != encoding["questions"]:
            record["qwen35_questions"] = q35["questions"]  # spans differ: kept so the encoder test can use them
        if hf_auto is not None and auto_ids(hf_auto, request, max_length) != encoding["ids"]:
            auto_differs.append(case["name"])
        ids, length = encoding["ids"], encoding["input_tokens"]
        record["usage"] = {"input_tokens": length, "output_tokens": 0}
        record["forward"] = length <= FORWARD_LIMIT
        if record["forward"]:
            tick = time.perf_counter()
            rows = backbone.rows(ids)
            rows_bf16 = backbone_bf16.rows(ids) if length <= BF16_LIMIT else None
            forward_s += time.perf_counter() - tick
            result = ref.head_forward(weights, DEMO_HEAD, rows, backbone.lm_head, ids, encoding)
            checks.update(weights, module, DEMO_HEAD, rows, backbone.lm_head, ids, encoding, result, generator,
                          rows_bf16)
            record["results"] = results_of(encoding, result)
            record["answers"], record["answers_raw"], record["confidence"] = {}, {}, {}
            for q, r in zip(encoding["questions"], record["results"]):
                rq = request["questions"][q["id"]]
                record["answers"][q["id"]] = ref.answer(q, rq, r["probabilities"])
                record["answers_raw"][q["id"]] = ref.answer(q, rq, r["probabilities"], digits=None)
                record["confidence"][q["id"]] = ref.confidences(r["probabilities"])
            record["rows_stored"] = length <= ROWS_LIMIT and sum(len(v) for v in rows_kept.values()) + length \
                <= ROWS_BUDGET
            if record["rows_stored"]:
                rows_kept[case["name"]] = rows.contiguous()
        print(f"  {case['name']}: {length} tokens ({encoding['fixed_tokens']} fixed, {encoding['state_tokens']} "
              f"state, {encoding['state_tokens_dropped']} dropped), {len(encoding['questions'])} questions, "
              f"{sum(len(q['options']) for q in encoding['questions'])} options"
              + ("" if record["forward"] else f", not run (over {FORWARD_LIMIT})"))
        cases.append(record)
    print(f"demo: {len(cases)} requests, transformers forward {forward_s:.1f} s (fp32 + bf16)")
    if hf_auto is not None:
        print(f"transformers AutoTokenizer ids differ from tokenizers' on {len(auto_differs)} requests {auto_differs}")
    meta = {"model": "models/demo", "head_config": DEMO_HEAD, "rows_file": "demo.rows.safetensors",
            "tokenizers": {"encoding": "models/demo/tokenizer.json",
                           "qwen35_ids": "tests/fixtures/tokenizer/qwen35-synthetic/tokenizer.json"},
            "checks": checks.summary(),
            "auto_tokenizer_differs": auto_differs if hf_auto is not None else "not checked"}
    return meta, cases, rows_kept, checks


def auto_tokenizer(folder):
    """transformers' own tokenizer for the folder (what the reference code calls), for a comparison only."""
    try:
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        return lambda text: tok(text, add_special_tokens=False)["input_ids"]
    except Exception as error:  # informative only: the goldens are defined by tokenizers
        print(f"transformers AutoTokenizer not compared: {error}")
        return None


def auto_ids(tokenize, request, max_length):
    try:
        return ref.encode(tokenize, request, max_length, request.get("truncation"))["ids"]
    except Exception as error:  # informative only
        return repr(error)


def tiny_goldens(repo, weights, module, generator, rng):
    backbone = Backbone(os.path.join(repo, "tests", "fixtures", "models", "tiny-mm"), torch.float32)
    checks, cases, rows_kept = Checks(), [], {}
    for case in decision_cases.id_cases(rng, backbone.lm_head.shape[0]):
        rows = backbone.rows(case["ids"])
        result = ref.head_forward(weights, TINY_HEAD, rows, backbone.lm_head, case["ids"], case)
        checks.update(weights, module, TINY_HEAD, rows, backbone.lm_head, case["ids"], case, result, generator)
        cases.append(dict(case, results=results_of(case, result)))
        rows_kept[case["name"]] = rows.contiguous()
        print(f"  {case['name']}: {len(case['ids'])} ids, {len(case['questions'])} questions")
    meta = {"model": "tests/fixtures/models/tiny-mm-clef", "head_config": TINY_HEAD,
            "rows_file": "tiny-mm-clef.rows.safetensors", "checks": checks.summary()}
    return meta, cases, rows_kept, checks


def write_json(path, meta, cases):
    """One request per line, so that a regenerated file diffs line by line."""
    with open(path, "w", encoding="utf-8") as f:
        head = json.dumps(meta, ensure_ascii=False, sort_keys=True)
        f.write(head[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    json.load(open(path, encoding="utf-8"))  # still one JSON document


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--seed", type=int, default=20261208)
    args = parser.parse_args()
    began = time.perf_counter()
    torch.set_num_threads(1)
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "tokenizers": tokenizers.__version__}
    print(versions)
    check_inputs(args.repo)
    generator = torch.Generator().manual_seed(args.seed)
    rng = random.Random(args.seed)
    demo_w, demo_m = make_decision_model(os.path.join(args.repo, "models", "demo"),
                                         os.path.join(args.out, "models", "demo"), DEMO_HEAD, DEMO_SCALARS, generator)
    tiny_w, tiny_m = make_decision_model(os.path.join(args.repo, "tests", "fixtures", "models", "tiny-mm"),
                                         os.path.join(args.out, "models", "tiny-mm-clef"), TINY_HEAD, TINY_SCALARS,
                                         generator)
    folder = os.path.join(args.out, "decisions")
    os.makedirs(folder, exist_ok=True)
    all_ok = True
    for name, make in (("demo", lambda: demo_goldens(args.repo, demo_w, demo_m, generator, rng)),
                       ("tiny-mm-clef", lambda: tiny_goldens(args.repo, tiny_w, tiny_m, generator, rng))):
        tick = time.perf_counter()
        meta, cases, rows, checks = make()
        meta.update(generator=dict(versions, script="tools/make_decision_fixtures.py", seed=args.seed),
                    about="Decision goldens (issue 8): see tools/make_decision_fixtures.py and spec/systemone.md")
        write_json(os.path.join(folder, f"{name}.json"), meta, cases)
        save_file(rows, os.path.join(folder, meta["rows_file"]), metadata={"seed": str(args.seed), **versions})
        print(f"{name}: {len(cases)} requests, rows of {len(rows)}, {time.perf_counter() - tick:.1f} s; checks "
              f"{json.dumps(meta['checks'])}")
        all_ok = all_ok and checks.ok()
    with open(os.path.join(args.out, "fixtures.sha256"), "w") as f:
        for base, _, names in sorted(os.walk(args.out)):
            for n in sorted(names):
                path = os.path.join(base, n)
                rel = "./" + os.path.relpath(path, args.out)
                if rel.startswith(("./decisions/", "./models/tiny-mm-clef/", "./models/demo/joint_head")):
                    f.write(f"{sha256(path)}  {rel}\n")
    print(f"done in {time.perf_counter() - began:.1f} s; cross-checks {'agree' if all_ok else 'DISAGREE'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
