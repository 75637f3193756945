#!/usr/bin/env python3
"""The runtime adapter's gate (design/targets.md: stock base + runtime adapter against the merged checkpoint, mean KL
<= 1e-3 and the same top option on >= 99% of questions; latency through the adapter vs merged: first bar 1.3x).

Reads what tools/gpu_adapter_gate.sh's duet phases wrote (each a decision_gate_9b.py `duet` run: duet_answers.jsonl
and decision_gate.json) and the reference.json they answered, and compares:
  - adapter against merged: the merged checkpoint's own answers (duet serving it alone) take the reference's place, and
    decision_gate_9b.evaluate() measures the adapter's answers against them (KL, top option, exactness at 4 at once,
    its planted controls);
  - base against merged: the base with the same head and no adapter, the planted control, must FAIL that gate;
  - latency p50 per length bucket, adapter / merged;
  - and, from each phase's own report, both against transformers BF16 + the reference head.
Standard library only.

    python3 tools/adapter_gate_compare.py --merged OUT/merged --adapter OUT/adapter --base OUT/base \
        --reference WORK-merged/dgate/reference.json --out OUT/adapter_gate.json
Exit status 0 when the adapter passes against merged and the control fails; 1 otherwise.
"""
import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decision_gate_9b as gate  # noqa: E402


def answers_of(folder):
    """{request index: {"alone", "together", "warm"}} from a duet phase's duet_answers.jsonl."""
    out = {}
    with open(os.path.join(folder, "duet_answers.jsonl"), encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            out[record["request"]] = record
    return out


def merged_as_reference(reference, merged):
    """reference.json with every question's probabilities replaced by the merged checkpoint's answer (requests whose
    merged answer is missing or failed are left without questions, so nothing is compared on them)."""
    out = copy.deepcopy(reference)
    for r in out["requests"]:
        answer = merged.get(r["index"], {}).get("alone")
        if "questions" not in r or not answer or answer.get("status") != 200:
            r.pop("questions", None)
            continue
        parsed, _, _ = gate.parse_answer(answer["body"], r["questions"])
        for q, d in zip(r["questions"], parsed):
            q["probabilities"] = d["probabilities"]
            q.pop("fp32_probabilities", None)
    return out


def evaluate_against(reference, answers):
    pick = lambda key: {i: a[key] for i, a in answers.items() if a.get(key) is not None}  # noqa: E731
    return gate.evaluate(reference, pick("alone"), pick("together"), pick("warm"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("merged", "adapter", "base"):
        parser.add_argument(f"--{name}", required=True, help=f"the {name} phase's output folder")
    parser.add_argument("--reference", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    reference = json.load(open(args.reference, encoding="utf-8"))
    merged = answers_of(args.merged)
    pseudo = merged_as_reference(reference, merged)
    adapter = evaluate_against(pseudo, answers_of(args.adapter))
    control = evaluate_against(pseudo, answers_of(args.base))
    reports = {name: json.load(open(os.path.join(folder, "decision_gate.json"), encoding="utf-8"))
               for name, folder in (("merged", args.merged), ("adapter", args.adapter), ("base", args.base))}

    latency = []
    for m, a in zip(reports["merged"]["buckets"], reports["adapter"]["buckets"]):
        ratio = a["alone_p50_ms"] / m["alone_p50_ms"] if a["alone_p50_ms"] and m["alone_p50_ms"] else None
        latency.append({"bucket": m["bucket"], "merged_p50_ms": m["alone_p50_ms"], "adapter_p50_ms": a["alone_p50_ms"],
                        "ratio": ratio, "within_first_bar_1.3x": None if ratio is None else ratio <= 1.3,
                        "within_goal_1.1x": None if ratio is None else ratio <= 1.1})
    result = {
        "adapter_vs_merged": {"gate": adapter["gate"], "overall": adapter["overall"], "buckets": adapter["buckets"],
                              "exactness": adapter["exactness"], "controls": adapter["controls"]},
        "base_vs_merged_control": {"overall": control["overall"], "fails_the_gate": not control["gate"]["pass"]},
        "against_transformers": {name: {"pass": rep["gate"]["pass"], "mean_kl": rep["overall"]["mean_kl"],
                                        "top_agreement": rep["overall"]["top_agreement"]}
                                 for name, rep in reports.items()},
        "latency": latency,
    }
    result["pass"] = adapter["gate"]["pass"] and not control["gate"]["pass"]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)

    o, c = adapter["overall"], control["overall"]
    print(f"adapter vs merged: mean KL {gate.fmt(o['mean_kl'])}, top option {gate.fmt(o['top_agreement'], '.4f')} of "
          f"{o['questions']} questions ({o['top_disagreements']} differ), max KL {gate.fmt(o['max_kl'])} -> "
          f"{'PASS' if adapter['gate']['pass'] else 'FAIL'}; 4 at once = alone: "
          f"{adapter['exactness']['identical']} identical, {adapter['exactness']['differing']} differing")
    print(f"control, base without adapter vs merged: mean KL {gate.fmt(c['mean_kl'])}, top option "
          f"{gate.fmt(c['top_agreement'], '.4f')} -> {'fails, as it must' if not control['gate']['pass'] else 'PASSES'}")
    for name, rep in result["against_transformers"].items():
        print(f"{name} vs transformers BF16 + reference head: mean KL {gate.fmt(rep['mean_kl'])}, top option "
              f"{gate.fmt(rep['top_agreement'], '.4f')}")
    for row in latency:
        print(f"latency {row['bucket']:>6}: merged p50 {gate.fmt(row['merged_p50_ms'], '.1f')} ms, adapter p50 "
              f"{gate.fmt(row['adapter_p50_ms'], '.1f')} ms, ratio {gate.fmt(row['ratio'], '.3f')}")
    print(f"adapter gate: {'PASS' if result['pass'] else 'FAIL'}; wrote {args.out}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
