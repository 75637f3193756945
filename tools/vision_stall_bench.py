#!/usr/bin/env python3
"""How long an image holds other requests' decode steps (issue 21 item 6), against a running `duet serve` of a model
with a vision tower.

    python3 tools/vision_stall_bench.py --url http://127.0.0.1:18090 [--sizes 1024,2048] [--text-tokens 4096]

For each intruder (an image of S x S pixels with a short question, then a text prompt of about --text-tokens tokens
for comparison: the stall a prefill already causes), a streamed chat request decodes (ignore_eos, --stream-tokens
tokens); once it has streamed --warm-tokens tokens the intruder is sent (max_tokens 1, not streamed). Reported: the
stream's inter-token gaps before the intruder (median: a decode step), and while the intruder ran (the largest gap,
what the stream waited at worst, and how many gaps), and the intruder's own latency. Run it against a server started
with `--vision-step-ms 30` (the default: the tower spread over steps) and with a share no stage fills (e.g.
`--vision-step-ms 60000`: the whole tower in one step, as before) to compare. Images are made here (numpy, PIL: the
GPU machine's Python has them), a gradient, a checker and noise, PNG as a data URL.
"""
import argparse
import base64
import http.client
import io
import json
import statistics
import sys
import threading
import time
import urllib.parse

import vision_gate_cases as cases


def image_url(size, seed):
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(cases.pattern(size, size, seed)).save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def connect(url, timeout=600):
    parsed = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)


def model_name(url):
    connection = connect(url)
    connection.request("GET", "/v1/models")
    return json.loads(connection.getresponse().read())["data"][0]["id"]


def post(url, body):
    connection = connect(url)
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"intruder: HTTP {response.status}: {data[:400]!r}")
    return json.loads(data)


def stream(url, model, tokens, times, started, failed):
    """A streamed greedy chat request: the arrival time of every content chunk goes to `times`."""
    body = {"model": model, "messages": [{"role": "user", "content": cases.words(40, 11)}], "stream": True,
            "max_tokens": tokens, "ignore_eos": True, "temperature": 0}
    connection = connect(url)
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        failed.append(f"stream: HTTP {response.status}: {response.read()[:400]!r}")
        started.set()
        return
    started.set()
    for line in response:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        delta = chunk["choices"][0].get("delta", {}) if chunk.get("choices") else {}
        if delta.get("content") or delta.get("reasoning_content"):  # a random model's tokens may be read as thinking
            times.append(time.monotonic())


def one(url, model, name, intruder, stream_tokens, warm_tokens):
    times, started, failed = [], threading.Event(), []
    thread = threading.Thread(target=stream, args=(url, model, stream_tokens, times, started, failed))
    thread.start()
    started.wait()
    if failed:
        raise SystemExit(failed[0])
    while len(times) < warm_tokens and thread.is_alive():
        time.sleep(0.002)
    sent = time.monotonic()
    answer = post(url, intruder)
    answered = time.monotonic()
    thread.join()
    gaps = [(b - a, a, b) for a, b in zip(times, times[1:])]
    before = [g for g, a, b in gaps if b <= sent]
    during = [g for g, a, b in gaps if b > sent and a < answered]
    result = {"intruder": name, "prompt_tokens": answer.get("usage", {}).get("prompt_tokens"),
              "intruder_ms": 1e3 * (answered - sent), "step_ms_before": 1e3 * statistics.median(before) if before else 0.0,
              "largest_gap_ms": 1e3 * max(during) if during else None, "gaps_during": len(during),
              "streamed": len(times)}
    print(f"{name:>12}: {result['prompt_tokens']} prompt tokens, answered in {result['intruder_ms']:.1f} ms; the "
          f"stream: a step {result['step_ms_before']:.2f} ms before, {len(during)} tokens while it ran, the longest "
          f"wait {result['largest_gap_ms'] or 0:.1f} ms", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--sizes", default="1024,2048", help="square images' sides in pixels")
    parser.add_argument("--text-tokens", type=int, default=4096, help="the text intruder's length (0: none)")
    parser.add_argument("--stream-tokens", type=int, default=600)
    parser.add_argument("--warm-tokens", type=int, default=30)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = []
    model = model_name(args.url)
    for i, size in enumerate(int(s) for s in args.sizes.split(",") if s):
        content = [{"type": "image_url", "image_url": {"url": image_url(size, 100 + i)}},
                   {"type": "text", "text": "What is in this image?"}]
        intruder = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 1,
                    "temperature": 0}
        results.append(one(args.url, model, f"{size}x{size}", intruder, args.stream_tokens, args.warm_tokens))
    if args.text_tokens > 0:
        intruder = {"model": model, "max_tokens": 1, "temperature": 0,
                    "messages": [{"role": "user", "content": cases.words(args.text_tokens, 7)}]}
        results.append(one(args.url, model, f"text ~{args.text_tokens // 1000}K", intruder, args.stream_tokens,
                           args.warm_tokens))
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
