"""The baseline of the speed benchmark: a bare Locust-style streaming loop that keeps only first and last times.

What a user writes in a plain locustfile with FastHttpUser: geventhttpclient's request, then `resp.readline()` per
SSE line, stamping the first and the last content line of each stream and counting them; no per-chunk timestamps,
no JSON decoding, no records. Run in its own process (gevent, monkey-patched, like Locust):

    python -m harness.bench.bare_locust --url URL --streams 256 --tokens 4096 [--api chat|completions] [--out F]

It prints (and writes) one JSON object: streams, content lines seen, CPU seconds of this process during the load,
wall seconds, tokens per CPU second. The load is `--streams` requests all started at once (one greenlet each).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402
from geventhttpclient.url import URL  # noqa: E402


def one_stream(http: HTTPClient, uri: str, body: bytes) -> tuple[int, int, int]:
    """(content lines, first ns, last ns) of one stream: readline per line, only the first and last times kept."""
    resp = http.request("POST", uri, body=body, headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    first = last = 0
    n = 0
    while True:
        line = resp.readline(b"\n")
        if not line:
            break
        if line.startswith(b"data: ") and line[6:7] == b"{" and b'"choices":[]' not in line:
            last = time.perf_counter_ns()
            if not first:
                first = last
            n += 1
    return n, first, last


def run(url: str, streams: int, tokens: int, api: str) -> dict:
    http = HTTPClient.from_url(URL(url.rstrip("/") + "/"), concurrency=streams, network_timeout=600, connection_timeout=30)
    chat = api == "chat"
    payload = {"model": "bare", "max_tokens": tokens, "stream": True, "stream_options": {"include_usage": True}}
    payload.update({"messages": [{"role": "user", "content": "hello there"}]} if chat else {"prompt": "hello there"})
    body = json.dumps(payload).encode()
    uri = "/v1/chat/completions" if chat else "/v1/completions"
    cpu0, wall0 = time.process_time(), time.perf_counter()
    jobs = [gevent.spawn(one_stream, http, uri, body) for _ in range(streams)]
    gevent.joinall(jobs, raise_error=True)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    seen = sum(j.value[0] for j in jobs)
    return {"tool": "bare Locust-style loop (geventhttpclient readline, first/last times only)", "streams": streams,
            "tokens_per_stream": tokens, "api": api, "content_lines": seen, "all_seen": seen == streams * tokens,
            "cpu_s": cpu, "wall_s": wall, "tokens_per_cpu_s": seen / cpu if cpu > 0 else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.bench.bare_locust", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--streams", type=int, default=256, help="streams, all started at once")
    p.add_argument("--tokens", type=int, default=4096, help="max_tokens of each stream")
    p.add_argument("--api", choices=["chat", "completions"], default="chat")
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args(argv)
    for flag, v, lo in (("--streams", a.streams, 1), ("--tokens", a.tokens, 1)):
        if v < lo:
            print(f"error: {flag} must be >= {lo}, got {v}.", file=sys.stderr)
            return 1
    res = run(a.url, a.streams, a.tokens, a.api)
    text = json.dumps(res)
    print(text, flush=True)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
