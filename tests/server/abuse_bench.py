#!/usr/bin/env python3
"""Reliability benchmark of `duet serve` under hostile and heavy clients (docs/benchmarks.md has its receipts).

Starts `duet serve` on the demo model, then runs, one after another:
  hold   N idle connections and M slowloris connections (a header line a second; each reconnects when the
         server's header deadline cuts it) while a separate process probes GET /health on fresh connections and
         another client sends chat requests: /health latency p50/p99/max and chat answers.
  load   C keep-alive clients sending chat and completion requests (a quarter streamed) back to back for S seconds,
         then the same with a new connection per request: every request must be answered 200 or 429 (503 is
         counted apart), none lost, every 200 complete (a whole JSON answer, or a stream ending in [DONE]).
  keys   objects of 25k / 50k / 100k keys on /v1/chat/completions (refused while read: time to the answer), then
         chat latency alone and beside 4 clients sending 3 MB bodies of a million values to /tokenize back to back.
  bodies N slow uploads of 7.9 MB (all but the last byte sent, then held) against --max-buffered-body-bytes:
         how many are held and how many refused 503, and resident memory before, while held, after they close.
  takeover one client opens --max-connections idle sockets (reopening any that close), while fresh clients probe
         /health and chat: how many of them fail.
Resident memory (duet_process_resident_bytes) before, during and after each. The fuzz at 100,000 bodies per route
is the ctest binary with DUET_FUZZ_BODIES=100000 (see docs/benchmarks.md).

Usage: tests/server/abuse_bench.py [--duet build/src/cli/duet] [--idle 10000] [--slowloris 1000] [--hold-seconds 60]
                                   [--clients 256] [--load-seconds 60] [--uploads 256] [--phases hold,load,keys,...]
Exits non-zero when any request was lost or answered wrongly, or /health p99 is 50 ms or more.
"""
import argparse
import asyncio
import json
import multiprocessing
import os
import re
import resource
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHAT = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 16, "temperature": 0.7}
COMPLETION = {"prompt": "Once upon a time", "max_tokens": 16, "ignore_eos": True}


def max_connections(args):
    return args.idle + args.slowloris + args.clients + 500


def start_server(args):
    command = [args.duet, "serve", os.path.join(ROOT, "models/demo"), "--port", "0", "--parallel", "16",
               "--queue-limit", "64", "--max-connections", str(max_connections(args)),
               "--idle-timeout", "3600", "--no-thinking", "--max-buffered-body-bytes", str(args.body_budget)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open("/tmp/abuse_bench_serve.log", "w"),
                              text=True)
    line = server.stdout.readline()
    port = int(re.search(r"http://[0-9.]+:([0-9]+)", line).group(1))
    for _ in range(1200):  # /health answers 503 while the model loads
        try:
            if http_get(port, "/health")[0] == 200:
                return server, port
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("duet serve did not answer /health")


def http_get(port, path):
    """One GET on a fresh connection; returns (status, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head[9:12]), body


def resident_mb(port):
    _, body = http_get(port, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("duet_process_resident_bytes"):
            return float(line.split()[-1]) / 1e6
    return -1.0


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def probe_health(port, seconds, queue):
    """Runs in its own process: GET /health on a fresh connection every 50 ms; the latencies in ms."""
    latencies, failures = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            status, _ = http_get(port, "/health")
            if status == 200:
                latencies.append((time.monotonic() - started) * 1000)
            else:
                failures += 1
        except OSError:
            failures += 1
        time.sleep(max(0.0, 0.05 - (time.monotonic() - started)))
    queue.put((latencies, failures))


async def read_response(reader):
    """Reads one HTTP/1.1 response; returns (status, headers, body) with a chunked body joined."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0][9:12])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def request_bytes(path, body, keep_alive):
    data = json.dumps(body).encode()
    connection = "keep-alive" if keep_alive else "close"
    return (f"POST {path} HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nConnection: {connection}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def complete(path, stream, status, body):
    """Whether a 200's body is a whole answer: JSON with a finish_reason, or a stream ending in [DONE]."""
    if stream:
        return body.rstrip(b"\r\n").endswith(b"data: [DONE]") and b'"finish_reason":"' in body
    answer = json.loads(body)
    return answer["choices"][0]["finish_reason"] in ("stop", "length")


async def idle_connection(port, held, stop):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    held.append(writer)
    await stop.wait()


async def slowloris(port, stop, counts):
    """A header line a second, forever; when the server cuts it (408), reconnect."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: a\r\n")
            line = 0
            answer = b""
            while not stop.is_set():
                try:
                    answer = await asyncio.wait_for(reader.read(4096), 1.0)
                    break  # the server answered, or closed
                except asyncio.TimeoutError:
                    writer.write(f"X-Slow-{line}: 1\r\n".encode())
                    line += 1
            if answer:
                status = int(answer[9:12])
                counts[status] = counts.get(status, 0) + 1
            elif not stop.is_set():
                counts["closed"] = counts.get("closed", 0) + 1
            writer.close()
        except (OSError, ValueError):
            counts["reset"] = counts.get("reset", 0) + 1


async def chat_client(port, stop, results):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while not stop.is_set():
        started = time.monotonic()
        writer.write(request_bytes("/v1/chat/completions", CHAT, True))
        status, _, body = await read_response(reader)
        results.append((status, complete("/v1/chat/completions", False, status, body) if status == 200 else True,
                        time.monotonic() - started))
    writer.close()


async def hold_phase(args, port):
    print(f"hold: {args.idle} idle + {args.slowloris} slowloris connections for {args.hold_seconds} s", flush=True)
    before = resident_mb(port)
    stop, held, slow_counts, chats = asyncio.Event(), [], {}, []
    opened = time.monotonic()
    tasks = []
    for i in range(args.idle):
        tasks.append(asyncio.create_task(idle_connection(port, held, stop)))
        if i % 500 == 499:
            await asyncio.sleep(0.05)  # let the backlog drain
    while len(held) < args.idle:
        await asyncio.sleep(0.1)
    tasks += [asyncio.create_task(slowloris(port, stop, slow_counts)) for _ in range(args.slowloris)]
    print(f"  opened {args.idle} idle connections in {time.monotonic() - opened:.1f} s", flush=True)
    spawn = multiprocessing.get_context("spawn")  # a fresh process, not a fork holding 11,000 client sockets
    queue = spawn.Queue()
    probe = spawn.Process(target=probe_health, args=(port, args.hold_seconds, queue))
    probe.start()
    tasks.append(asyncio.create_task(chat_client(port, stop, chats)))
    await asyncio.sleep(args.hold_seconds / 2)
    during = resident_mb(port)
    open_now = metric(port, "duet_http_connections_open")
    await asyncio.sleep(args.hold_seconds / 2)
    latencies, probe_failures = queue.get()
    probe.join()
    stop.set()
    for writer in held:
        writer.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(3)
    after = resident_mb(port)
    chat_ok = sum(1 for status, whole, _ in chats if status == 200 and whole)
    print(f"  connections open mid-run: {open_now:.0f}", flush=True)
    print(f"  /health: {len(latencies)} probes, p50 {percentile(latencies, 50):.2f} ms, "
          f"p99 {percentile(latencies, 99):.2f} ms, max {max(latencies):.2f} ms, {probe_failures} failed")
    print(f"  chat: {len(chats)} requests, {chat_ok} answered 200 and whole, "
          f"p50 {percentile([c[2] for c in chats], 50) * 1000:.1f} ms")
    print(f"  slowloris answers: {dict(sorted(slow_counts.items(), key=str))}")
    print(f"  resident memory: before {before:.1f} MB, during {during:.1f} MB, after {after:.1f} MB", flush=True)
    return probe_failures == 0 and percentile(latencies, 99) < 50 and chat_ok == len(chats) and chat_ok > 0


def metric(port, name):
    _, body = http_get(port, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return -1.0


async def load_client(port, index, stop, tally, keep_alive):
    connection = None
    n = 0
    while not stop.is_set():
        stream = n % 4 == index % 4
        path, body = ("/v1/completions", dict(COMPLETION)) if n % 2 else ("/v1/chat/completions", dict(CHAT))
        body["stream"] = stream
        n += 1
        try:
            if connection is None:
                connection = await asyncio.open_connection("127.0.0.1", port)
            reader, writer = connection
            writer.write(request_bytes(path, body, keep_alive))
            status, headers, data = await asyncio.wait_for(read_response(reader), 120)
            if not keep_alive or headers.get("connection") == "close":
                writer.close()
                connection = None
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as error:
            tally["lost"] += 1
            tally.setdefault("errors", []).append(repr(error))
            connection = None
            continue
        if status == 200:
            tally["200"] += 1
            if not complete(path, stream, status, data):
                tally["incomplete"] += 1
        elif status in (429, 503):
            tally[str(status)] += 1
            await asyncio.sleep(float(headers.get("retry-after", "1")) * 0.2)
        else:
            tally["other"] += 1
    if connection:
        connection[1].close()


async def load_phase(args, port, keep_alive):
    kind = "keep-alive" if keep_alive else "new-connection"
    print(f"load: {args.clients} {kind} clients for {args.load_seconds} s", flush=True)
    before = resident_mb(port)
    tally = {"200": 0, "429": 0, "503": 0, "other": 0, "lost": 0, "incomplete": 0}
    stop = asyncio.Event()
    started = time.monotonic()
    tasks = [asyncio.create_task(load_client(port, i, stop, tally, keep_alive)) for i in range(args.clients)]
    await asyncio.sleep(args.load_seconds / 2)
    during = resident_mb(port)
    await asyncio.sleep(args.load_seconds / 2)
    stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    await asyncio.sleep(2)
    after = resident_mb(port)
    total = tally["200"] + tally["429"] + tally["503"] + tally["other"] + tally["lost"]
    print(f"  {total} requests in {elapsed:.1f} s: {tally['200']} answered 200 ({tally['incomplete']} incomplete), "
          f"{tally['429']} refused 429, {tally['503']} refused 503, {tally['other']} other, {tally['lost']} lost")
    if tally.get("errors"):
        print(f"  first errors: {tally['errors'][:3]}")
    print(f"  resident memory: before {before:.1f} MB, during {during:.1f} MB, after {after:.1f} MB", flush=True)
    return tally["lost"] == 0 and tally["other"] == 0 and tally["incomplete"] == 0 and tally["200"] > 0


async def post_timed(port, path, data):
    """One POST on a fresh connection; (status, seconds to the whole answer)."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {len(data)}\r\n\r\n"
                 .encode() + data)
    status, _, _ = await read_response(reader)
    writer.close()
    return status, time.monotonic() - started


async def keys_phase(args, port):
    print("keys: objects of many keys, and large bodies beside chat", flush=True)
    ok = True
    for keys in (25000, 50000, 100000):
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}],
                           "x": {f"k{i}": i for i in range(keys)}}).encode()
        status, seconds = await post_timed(port, "/v1/chat/completions", body)
        print(f"  {keys} keys ({len(body) / 1e6:.1f} MB): {status} in {seconds * 1000:.1f} ms", flush=True)
        ok = ok and status == 413
    chat = json.dumps(dict(CHAT, max_tokens=1)).encode()
    alone = [(await post_timed(port, "/v1/chat/completions", chat))[1] for _ in range(20)]
    big = json.dumps({"x": [0] * 999990}).encode()  # parsed whole, then refused (no prompt): the parse is the work
    stop, parsed = asyncio.Event(), []

    async def big_client():
        while not stop.is_set():
            parsed.append(await post_timed(port, "/tokenize", big))
    tasks = [asyncio.create_task(big_client()) for _ in range(4)]
    await asyncio.sleep(0.5)
    beside = [(await post_timed(port, "/v1/chat/completions", chat))[1] for _ in range(20)]
    stop.set()
    await asyncio.gather(*tasks)
    print(f"  chat (1 token) alone: p50 {percentile(alone, 50) * 1000:.1f} ms, max {max(alone) * 1000:.1f} ms; beside 4 "
          f"clients of {len(big) / 1e6:.1f} MB bodies ({len(parsed)} sent, each answered in p50 "
          f"{percentile([p[1] for p in parsed], 50) * 1000:.0f} ms): p50 {percentile(beside, 50) * 1000:.1f} ms, "
          f"max {max(beside) * 1000:.1f} ms", flush=True)
    return ok


async def bodies_phase(args, port):
    size = 7900000
    print(f"bodies: {args.uploads} slow uploads of {size / 1e6:.1f} MB, --max-buffered-body-bytes "
          f"{args.body_budget}", flush=True)
    before = resident_mb(port)
    writers, refused = [], 0
    body = b'{"x": "' + b"a" * (size - 9) + b'"}'
    for _ in range(args.uploads):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST /tokenize HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n\r\n".encode())
        writers.append((reader, writer))
    await asyncio.sleep(0.5)
    held = []
    for reader, writer in writers:
        try:
            answer = await asyncio.wait_for(reader.read(64), 0.01)
        except asyncio.TimeoutError:
            answer = b""
        if answer:
            refused += answer.startswith(b"HTTP/1.1 503")
            writer.close()
        else:
            writer.write(body[:-1])
            held.append(writer)
    for writer in held:
        try:
            await writer.drain()
        except OSError:
            pass
    await asyncio.sleep(2)
    during = resident_mb(port)
    for writer in held:
        writer.close()
    await asyncio.sleep(3)
    after = resident_mb(port)
    print(f"  {len(held)} held, {refused} refused 503 before a byte of their body was read", flush=True)
    print(f"  resident memory: before {before:.1f} MB, while held {during:.1f} MB, after {after:.1f} MB", flush=True)
    return after - before < 100


async def takeover_phase(args, port):
    cap = max_connections(args)
    print(f"takeover: one client holds {cap} idle connections (reopened when closed)", flush=True)
    stop, held = asyncio.Event(), []

    async def hog():
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                held.append(writer)
                await reader.read(1)  # returns when the server closes it
                writer.close()
            except OSError:
                await asyncio.sleep(0.1)
    tasks = []
    for i in range(cap):
        tasks.append(asyncio.create_task(hog()))
        if i % 500 == 499:
            await asyncio.sleep(0.05)
    await asyncio.sleep(2)
    loop = asyncio.get_running_loop()
    health_failed = 0
    for _ in range(110):
        try:
            status, _ = await loop.run_in_executor(None, http_get, port, "/health")
            health_failed += status != 200
        except OSError:
            health_failed += 1
    chat_failed = 0
    for _ in range(28):
        try:
            status, _ = await post_timed(port, "/v1/chat/completions", json.dumps(dict(CHAT, max_tokens=2)).encode())
            chat_failed += status != 200
        except (OSError, asyncio.IncompleteReadError):
            chat_failed += 1
    stop.set()
    for writer in held:
        writer.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(f"  /health: {health_failed} of 110 failed; chat: {chat_failed} of 28 failed", flush=True)
    return health_failed == 0 and chat_failed == 0


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duet", default=os.path.join(ROOT, "build/src/cli/duet"))
    parser.add_argument("--idle", type=int, default=10000)
    parser.add_argument("--slowloris", type=int, default=1000)
    parser.add_argument("--hold-seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--load-seconds", type=float, default=60)
    parser.add_argument("--uploads", type=int, default=256)
    parser.add_argument("--body-budget", type=int, default=512 << 20, help="--max-buffered-body-bytes of the server")
    parser.add_argument("--phases", default="hold,load,keys,bodies,takeover")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server inherits it too
    needed = args.idle + args.slowloris + args.clients + 200
    if hard < needed:
        raise SystemExit(f"ulimit -n is {hard}; this run needs {needed} file descriptors")
    server, port = start_server(args)
    try:
        print(f"duet serve on port {port}, pid {server.pid}; resident memory at start {resident_mb(port):.1f} MB")
        phases = args.phases.split(",")
        ok = True
        if "hold" in phases:
            ok = await hold_phase(args, port) and ok
        if "load" in phases:
            ok = await load_phase(args, port, keep_alive=True) and ok
            ok = await load_phase(args, port, keep_alive=False) and ok
        if "keys" in phases:
            ok = await keys_phase(args, port) and ok
        if "bodies" in phases:
            ok = await bodies_phase(args, port) and ok
        if "takeover" in phases:
            ok = await takeover_phase(args, port) and ok
        print(f"server alive: {server.poll() is None}; resident memory at the end {resident_mb(port):.1f} MB")
        ok = ok and server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=60)
    print("result:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
