"""Client CPU per streamed token on the hot path alone: workloads.stream_client against the one-token-per-write server.

A microbenchmark beside harness.bench.loadgen_speed: no Locust users, no records, no part writer — N greenlets of
one gevent process (monkey-patched, as the load process is) each stream one request through
`workloads.stream_client.stream_request` on a geventhttpclient client, every chunk stamped and parsed as in a run.
CPU is this child process's `time.process_time()` over the streams (after one warm-up round), so the figure is CPU
time, not wall time; the events per socket read tell the regime (1.0: every token read on its own, the quiet
machine's case; more: the client fell behind and read tokens in batches, which is cheaper per token).

Run: python -m harness.bench.client_cpu [--streams 64 --tokens 2000 --itl-s 0.001 --rounds 5 --server-cpu 1
     --client-cpu 0 --out F]; prints one JSON object with every round and the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.bench.token_server import start_token_server


def _child(url: str, streams: int, tokens: int, rounds: int) -> dict[str, Any]:
    # lazy: this child process patches itself (gevent's monkey.patch_all) before gevent, geventhttpclient and
    # workloads.stream_client (which imports them) are imported
    from gevent import monkey

    monkey.patch_all()
    import gevent
    from geventhttpclient import HTTPClient
    from geventhttpclient.url import URL

    from workloads.stream_client import stream_request

    http = HTTPClient.from_url(URL(url + "/"), concurrency=streams, network_timeout=600, connection_timeout=30)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": tokens,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}

    def one() -> dict[str, Any]:
        return stream_request(http, "/v1/chat/completions", body, headers, chat=True, timeout_s=600.0)

    out = []
    for r in range(rounds + 1):  # round 0 warms up (connections, imports, caches) and is not kept
        c0, w0 = time.process_time(), time.perf_counter()
        jobs = [gevent.spawn(one) for _ in range(streams)]
        gevent.joinall(jobs, raise_error=True)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        res = [j.value for j in jobs]
        bad = [x["error_class"] for x in res if x["error_class"] != "ok"]
        if bad:
            raise RuntimeError(f"streams failed: {bad[:5]}")
        events = sum(len(x["parse"].content_ns) for x in res)
        reads = sum(x.get("body_reads") or 0 for x in res)
        if r:
            out.append({"tokens": events, "cpu_s": cpu, "wall_s": wall, "us_per_token": cpu / events * 1e6,
                        "tokens_per_cpu_s": events / cpu if cpu else None, "events_per_read": events / reads if reads else None,
                        "every_chunk_recorded": events == streams * tokens})
    return {"rounds": out}


def measure(streams: int, tokens: int, itl_s: float, rounds: int, server_cpu: int | None, client_cpu: int | None) -> dict[str, Any]:
    with start_token_server(ttft_s=0.005, itl_s=itl_s, cpu=server_cpu, emit_log=False, max_lifetime_s=1800) as s:
        cmd = [sys.executable, "-m", "harness.bench.client_cpu", "--child", s.url, "--streams", str(streams),
               "--tokens", str(tokens), "--rounds", str(rounds)]
        pre = (lambda: os.sched_setaffinity(0, {client_cpu})) if client_cpu is not None else None
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, preexec_fn=pre)
        if p.returncode != 0:
            raise RuntimeError(f"the client process failed: {p.stderr[-2000:]}")
        res = json.loads(p.stdout.strip().splitlines()[-1])
    us = [r["us_per_token"] for r in res["rounds"]]
    return {"streams": streams, "tokens_per_stream": tokens, "itl_s": itl_s, "server_cpu": server_cpu, "client_cpu": client_cpu,
            **res, "us_per_token_median": statistics.median(us), "us_per_token_min": min(us),
            "tokens_per_cpu_s_median": 1e6 / statistics.median(us),
            "events_per_read_median": statistics.median([r["events_per_read"] or 0.0 for r in res["rounds"]])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.bench.client_cpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--tokens", type=int, default=2000, help="tokens per stream")
    p.add_argument("--itl-s", type=float, default=0.001, help="the server's token cadence")
    p.add_argument("--rounds", type=int, default=5, help="measured rounds (after one warm-up round)")
    p.add_argument("--server-cpu", type=int, default=None, help="core of the server (default: the last, with >= 2 cores)")
    p.add_argument("--client-cpu", type=int, default=None, help="core of the client (default: the first, with >= 2 cores)")
    p.add_argument("--out", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    for flag, v, lo, hi in (("--streams", a.streams, 1, 4096), ("--tokens", a.tokens, 1, 10_000_000), ("--rounds", a.rounds, 1, 100)):
        if not lo <= v <= hi:
            print(f"error: {flag} must be from {lo} to {hi}, got {v}.", file=sys.stderr)
            return 1
    if not 0.0 <= a.itl_s <= 1.0:
        print(f"error: --itl-s must be from 0 to 1 seconds, got {a.itl_s}.", file=sys.stderr)
        return 1
    if a.child:
        print(json.dumps(_child(a.child, a.streams, a.tokens, a.rounds)))
        return 0
    cores = sorted(os.sched_getaffinity(0))
    server = a.server_cpu if a.server_cpu is not None else (cores[-1] if len(cores) >= 2 else None)
    client = a.client_cpu if a.client_cpu is not None else (cores[0] if len(cores) >= 2 else None)
    for flag, c in (("--server-cpu", server), ("--client-cpu", client)):
        if c is not None and c not in cores:
            print(f"error: {flag} {c} is not one of this process's cores {cores}.", file=sys.stderr)
            return 1
    res = measure(a.streams, a.tokens, a.itl_s, a.rounds, server, client)
    text = json.dumps(res, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
