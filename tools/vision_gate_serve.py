#!/usr/bin/env python3
"""The 9B vision gate's serving side (issue 21; run by tools/gpu_vision_gate.sh against `duet serve WORK/model-vl
--backend cuda`). Python's standard library only.

    python3 tools/vision_gate_serve.py --url http://127.0.0.1:18090 --work WORK --out OUT [--only ids,exactness,ttft]
    python3 tools/vision_gate_serve.py selftest          # the pure parts, anywhere

ids        duet's /tokenize of each gate prompt (vision_gate_cases.gate_cases(), image_url data URLs of the same PNG
           files) against the ids transformers' chat template and processor gave (WORK/vl/prompts.json): the rows gate
           fed both sides the same ids; this checks that duet's server builds those ids itself.
exactness  (b) vision_gate_cases.exactness_requests(): 16 chat requests, 6 with images, greedy and seeded, 32 tokens
           each with logprobs and token ids, first one at a time, then all at once; each answer's choices and usage
           must be the same bytes both times. Planted controls sent with the concurrent batch (a seeded request with
           another seed, a greedy image request with its image mirrored) must differ from the original's answer.
ttft       (c) vision_gate_cases.ttft_case() (one 1024 x 1024 image and about 100 text tokens) streamed with
           max_tokens 1: the time from sending the request to the first chunk carrying the token, warm, median of 3,
           beside transformers' (OUT/ttft_transformers.json, written by vision_gate_9b.py reference).
Each part prints a line starting `SUMMARY` and writes OUT/<part>.json. Exit status 1 when a part fails.
"""
import argparse
import hashlib
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vision_gate_cases as cases  # noqa: E402


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def connect(url, timeout=600):
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)


def post(url, path, body):
    """(status, parsed JSON answer)."""
    conn = connect(url)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        data = answer.read()
        try:
            return answer.status, json.loads(data)
        except ValueError:
            return answer.status, {"raw": data.decode(errors="replace")}
    finally:
        conn.close()


def with_images(body, paths):
    """A request body with its image parts turned into data URLs."""
    out = dict(body)
    out["messages"] = cases.for_duet(body["messages"], paths)
    return out


def canonical(answer):
    """The bytes exactness compares: the choices (tokens, text, logprobs, finish reason) and usage, keys sorted; the
    id and the creation time differ between any two answers and are left out."""
    return json.dumps({"choices": answer.get("choices"), "usage": answer.get("usage")}, sort_keys=True,
                      separators=(",", ":")).encode()


def digest(answer):
    return hashlib.sha256(canonical(answer)).hexdigest()


def run_together(url, bodies):
    """Every body posted at once (a thread each, released together); answers in the bodies' order."""
    answers = [None] * len(bodies)
    ready = threading.Barrier(len(bodies))

    def one(i):
        ready.wait()
        answers[i] = post(url, "/v1/chat/completions", bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def compare_passes(labels, alone, together, controls):
    """alone, together: [(status, answer)] per request; controls: [(label, index of the original, (status, answer))].
    Returns (report, passed): every request 200 both times with the same bytes, every control 200 and unlike its
    original."""
    rows, equal, failed = [], 0, 0
    for label, a, b in zip(labels, alone, together):
        ok = a[0] == 200 and b[0] == 200
        same = ok and canonical(a[1]) == canonical(b[1])
        failed += not ok
        equal += same
        tokens = len((a[1].get("choices") or [{}])[0].get("token_ids") or []) if ok else 0
        rows.append({"request": label, "status": [a[0], b[0]], "equal": same, "tokens": tokens,
                     "sha256": digest(a[1]) if ok else None})
    control_rows, controls_ok = [], True
    for label, index, answer in controls:
        differs = answer[0] == 200 and alone[index][0] == 200 and canonical(answer[1]) != canonical(alone[index][1])
        controls_ok = controls_ok and differs
        control_rows.append({"control": label, "of": labels[index], "status": answer[0], "differs": differs})
    passed = equal == len(labels) and failed == 0 and controls_ok
    return {"requests": rows, "controls": control_rows, "equal": equal, "failed": failed, "total": len(labels),
            "controls_differ": controls_ok, "passed": passed}, passed


def first_token_chunk(event):
    """Whether a streamed chat chunk (parsed JSON) carries a generated token: token ids, or content or reasoning
    text (the first chunk, the role delta, carries neither)."""
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("token_ids") or delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def stream_ttft(url, body):
    """(seconds to the first chunk with a token, seconds to [DONE], usage) of one streamed chat request; the clock starts
    before the request is sent (the body is already encoded)."""
    data = json.dumps(body).encode()
    conn = connect(url)
    try:
        start = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", data, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        if answer.status != 200:
            raise SystemExit(f"ttft request: HTTP {answer.status}: {answer.read()[:500]!r}")
        first = done = None
        usage = None
        while True:
            line = answer.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = time.perf_counter() - start
                break
            event = json.loads(payload)
            if first is None and first_token_chunk(event):
                first = time.perf_counter() - start
            usage = event.get("usage") or usage
        return first, done, usage
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------------------ parts
def check_ids(url, work, paths, out):
    spec = json.load(open(os.path.join(work, "vl", "prompts.json")))
    rows, equal = [], 0
    for case, entry in zip(cases.gate_cases(), spec["prompts"]):
        status, answer = post(url, "/tokenize", {"messages": cases.for_duet(case["messages"], paths),
                                                 "add_generation_prompt": True})
        tokens = answer.get("tokens") if status == 200 else None
        same = tokens == entry["ids"]
        first_difference = None
        if tokens is not None and not same:
            first_difference = next((i for i, (a, b) in enumerate(zip(tokens, entry["ids"])) if a != b),
                                    min(len(tokens), len(entry["ids"])))
        equal += same
        rows.append({"prompt": case["name"], "status": status, "transformers": len(entry["ids"]),
                     "duet": len(tokens) if tokens is not None else None, "equal": same,
                     "first_difference": first_difference, "error": None if status == 200 else answer})
        log(f"ids {case['name']}: transformers {len(entry['ids'])}, duet {rows[-1]['duet']} (HTTP {status}): "
            f"{'equal' if same else 'DIFFERENT at ' + str(first_difference)}")
    passed = equal == len(rows)
    json.dump({"prompts": rows, "passed": passed}, open(os.path.join(out, "ids.json"), "w"), indent=1)
    print(f"SUMMARY ids: duet's /tokenize gives transformers' ids for {equal} of {len(rows)} image prompts: "
          f"{'PASS' if passed else 'FAIL'}", flush=True)
    return passed


def exactness(url, paths, out):
    requests = cases.exactness_requests()
    labels = [r["label"] for r in requests]
    bodies = [with_images(r["body"], paths) for r in requests]
    controls = cases.exactness_controls(requests)
    start = time.time()
    alone = [post(url, "/v1/chat/completions", body) for body in bodies]
    alone_s = time.time() - start
    start = time.time()
    answers = run_together(url, bodies + [with_images(body, paths) for _, _, body in controls])
    together_s = time.time() - start
    together, planted = answers[:len(bodies)], answers[len(bodies):]
    report, passed = compare_passes(labels, alone, together,
                                    [(label, index, answer) for (label, index, _), answer in zip(controls, planted)])
    report.update(alone_seconds=alone_s, together_seconds=together_s)
    for row in report["requests"]:
        log(f"{row['request']}: HTTP {row['status']}, {row['tokens']} tokens, "
            f"{'equal' if row['equal'] else 'UNEQUAL'} {row['sha256'] and row['sha256'][:16]}")
    for row in report["controls"]:
        log(f"control {row['control']} (of {row['of']}): HTTP {row['status']}, "
            f"{'differs, as it must' if row['differs'] else 'EQUAL: the comparison cannot see it'}")
    for status, answer in alone + together:
        if status != 200:
            log(f"an answer failed: HTTP {status}: {json.dumps(answer)[:300]}")
            break
    json.dump(report, open(os.path.join(out, "exactness.json"), "w"), indent=1)
    greedy = sum(1 for r in requests if r["body"].get("temperature") == 0)
    print(f"SUMMARY (b) exactness: {report['equal']} of {report['total']} chat requests ({len(cases.exactness_requests()) - greedy} "
          f"seeded, {greedy} greedy; 6 with images) give the same bytes all at once as alone, {report['failed']} failed "
          f"(alone {alone_s:.1f} s, together {together_s:.1f} s); controls (another seed, a mirrored image) "
          f"{'differ, as they must' if report['controls_differ'] else 'DO NOT differ: broken check'}: "
          f"{'PASS' if passed else 'FAIL'}", flush=True)
    return passed


def ttft(url, paths, out):
    case = cases.ttft_case()
    body = {"messages": cases.for_duet(case["messages"], paths), "stream": True, "max_tokens": 1, "temperature": 0,
            "return_token_ids": True, "stream_options": {"include_usage": True}}
    stream_ttft(url, body)  # warm
    runs = [stream_ttft(url, body) for _ in range(3)]
    if any(first is None for first, _, _ in runs):
        raise SystemExit(f"ttft: a stream ended without a token chunk: {runs}")
    duet_ms = statistics.median(first * 1e3 for first, _, _ in runs)
    usage = runs[0][2] or {}
    result = {"case": case["name"], "duet_median_ms": duet_ms, "duet_runs_ms": [r[0] * 1e3 for r in runs],
              "duet_done_ms": [r[1] * 1e3 if r[1] else None for r in runs], "duet_prompt_tokens":
              usage.get("prompt_tokens")}
    reference_path = os.path.join(out, "ttft_transformers.json")
    reference = json.load(open(reference_path)) if os.path.exists(reference_path) else None
    line = f"SUMMARY (c) TTFT, 1024x1024 image + ~100 text tokens ({usage.get('prompt_tokens')} prompt tokens): duet " \
           f"{duet_ms:.1f} ms (streamed, median of 3: {[round(r[0] * 1e3, 1) for r in runs]})"
    if reference:
        result["transformers"] = reference
        line += (f" | transformers BF16 {reference['median_ms']:.1f} ms (processor + forward + argmax, median of 3, "
                 f"{reference['prompt_tokens']} prompt tokens) | ratio {reference['median_ms'] / duet_ms:.2f}x")
        if usage.get("prompt_tokens") not in (None, reference["prompt_tokens"]):
            line += " | PROMPT LENGTHS DIFFER"
    json.dump(result, open(os.path.join(out, "ttft.json"), "w"), indent=1)
    print(line, flush=True)
    return True


# ------------------------------------------------------------------------------------------------- selftest
def selftest():
    """compare_passes with planted inequalities, the SSE chunk rule, the request set's shape."""
    def answer(tokens, text, seed=0):
        return 200, {"id": f"x{seed}", "created": seed, "choices": [{"index": 0, "token_ids": tokens,
                     "message": {"content": text}}], "usage": {"completion_tokens": len(tokens)}}

    labels = ["a", "b"]
    alone = [answer([1, 2], "x", 1), answer([3], "y", 2)]
    together = [answer([1, 2], "x", 7), answer([3], "y", 8)]  # other ids and times: still equal
    report, ok = compare_passes(labels, alone, together, [("seed", 1, answer([4], "z"))])
    assert ok and report["equal"] == 2, report
    report, ok = compare_passes(labels, alone, [alone[0], answer([3], "y ")], [("seed", 1, answer([4], "z"))])
    assert not ok and report["equal"] == 1
    report, ok = compare_passes(labels, alone, together, [("seed", 1, answer([3], "y", 9))])
    assert not ok and not report["controls_differ"]  # a control equal to its original fails the run
    report, ok = compare_passes(labels, [(500, {})] + alone[1:], together, [])
    assert not ok and report["failed"] == 1
    assert not first_token_chunk({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    assert first_token_chunk({"choices": [{"delta": {}, "token_ids": [5]}]})
    assert first_token_chunk({"choices": [{"delta": {"reasoning_content": "a"}}]})
    assert not first_token_chunk({"choices": [], "usage": {"prompt_tokens": 3}})
    requests = cases.exactness_requests()
    assert len(requests) == 16 and sum(1 for r in requests if cases.images_of(r["body"]["messages"])) == 6
    assert len({json.dumps(r["body"], sort_keys=True) for r in requests}) == 16
    controls = cases.exactness_controls(requests)
    assert [c[0] for c in controls] == ["another seed", "the image mirrored"]
    assert controls[1][2]["temperature"] == 0 and cases.images_of(controls[1][2]["messages"]) == ["i448x320_flipped"]
    assert cases.expand_image_pads("a<|image_pad|>b<|image_pad|>", [2, 1]) == "a" + "<|image_pad|>" * 2 + "b<|image_pad|>"
    assert [cases.image_tokens(n) for n in ("i224", "i448x320", "i1024", "i300x500", "i1200x160")] == [64, 140, 1024,
                                                                                                        144, 190]
    print("selftest: ok (exactness comparison with planted inequalities, stream chunks, the requests)")
    return 0


def main():
    if sys.argv[1:] == ["selftest"]:
        return selftest()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--work", default="/tmp/9b")
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="ids,exactness,ttft")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    paths = cases.write_images(os.path.join(args.work, "vl", "images"))
    ok = True
    for part in args.only.split(","):
        log(f"part {part}")
        ok = {"ids": check_ids, "exactness": exactness, "ttft": ttft}[part](args.url, *(
            (args.work, paths, args.out) if part == "ids" else (paths, args.out))) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
