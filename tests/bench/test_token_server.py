"""The independent one-token-per-write server of the speed benchmark: protocol, one send per token, emit log, bad input."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness.bench.token_server import ServerOptions, UsageError, start_token_server


@pytest.fixture(scope="module")
def server():
    s = start_token_server(ttft_s=0.01, itl_s=0.002, max_lifetime_s=300)
    yield s
    s.stop()


def _get(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=30).read())


def _request(path: str, body: dict, host: str, port: int) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def _addr(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def _read_response(sock: socket.socket) -> tuple[bytes, list[tuple[int, bytes]]]:
    """(head, chunks) of one chunked response, read to its terminator; each chunk as (size, payload)."""
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    end = buf.index(b"\r\n\r\n")
    head, pos = bytes(buf[:end]), end + 4
    chunks = []
    while True:
        while buf.find(b"\r\n", pos) < 0:
            buf += sock.recv(1 << 20)
        i = buf.index(b"\r\n", pos)
        size = int(buf[pos:i], 16)
        while len(buf) < i + 2 + size + 2:
            buf += sock.recv(1 << 20)
        chunks.append((size, bytes(buf[i + 2:i + 2 + size])))
        assert buf[i + 2 + size:i + 4 + size] == b"\r\n"
        pos = i + 4 + size
        if size == 0:
            return head, chunks


def _stream(url: str, path: str, body: dict, conn: socket.socket | None = None) -> tuple[bytes, list[bytes]]:
    host, port = _addr(url)
    s = conn or socket.create_connection((host, port), timeout=30)
    try:
        s.sendall(_request(path, body, host, port))
        head, chunks = _read_response(s)
    finally:
        if conn is None:
            s.close()
    return head, [p for _, p in chunks]


def test_chat_stream_is_one_event_per_chunk_with_usage_last(server):
    head, chunks = _stream(server.url, "/v1/chat/completions",
                           {"model": "m1", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 5,
                            "stream": True, "stream_options": {"include_usage": True}})
    assert head.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in head
    assert chunks[-1] == b""  # the terminator
    events = chunks[:-1]
    assert all(e.startswith(b"data: ") and e.endswith(b"\n\n") and e.count(b"\n\n") == 1 for e in events)
    objs = [json.loads(e[6:]) for e in events if e != b"data: [DONE]\n\n"]
    assert events[-1] == b"data: [DONE]\n\n"
    tokens, usage = objs[:-1], objs[-1]
    assert len(tokens) == 5 and all(o["choices"][0]["delta"]["content"] == " tok" for o in tokens)
    assert tokens[0]["choices"][0]["delta"]["role"] == "assistant" and tokens[0]["model"] == "m1"
    assert [o["choices"][0]["finish_reason"] for o in tokens] == [None] * 4 + ["length"]
    assert len({o["id"] for o in objs}) == 1
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def test_completions_without_usage_and_keep_alive(server):
    host, port = _addr(server.url)
    with socket.create_connection((host, port), timeout=30) as s:
        for n in (3, 4):  # two requests on one connection
            _, chunks = _stream(server.url, "/v1/completions", {"prompt": "a b", "max_tokens": n, "stream": True}, conn=s)
            objs = [json.loads(e[6:]) for e in chunks[:-2]]
            assert len(objs) == n and all(o["choices"][0]["text"] == " tok" and o["object"] == "text_completion" for o in objs)
            assert chunks[-2] == b"data: [DONE]\n\n"


def test_one_send_per_token_counted_and_logged(server):
    before = _get(server.url + "/harness/info")
    _stream(server.url, "/v1/completions", {"prompt": "x", "max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}})
    info = _get(server.url + "/harness/info")
    assert info["tokens_total"] - before["tokens_total"] == 40
    assert info["token_send_calls"] - before["token_send_calls"] == 40  # one send() per token ...
    assert info["partial_token_writes"] == before["partial_token_writes"]  # ... each taken whole by the kernel
    # headers, usage, [DONE] + terminator, and the answer that carried `before`
    assert info["other_send_calls"] - before["other_send_calls"] == 4
    log = _get(server.url + "/harness/emit_log")
    assert set(log) >= {"request_ids", "request_index", "token_index", "emit_ns", "scheduled_ns", "arrival_ns"}
    last = len(log["request_ids"]) - 1
    mine = [i for i, r in enumerate(log["request_index"]) if r == last]
    assert [log["token_index"][i] for i in mine] == list(range(40))
    emit = [log["emit_ns"][i] for i in mine]
    sched = [log["scheduled_ns"][i] for i in mine]
    assert all(e >= s for e, s in zip(emit, sched))  # never written before its due instant
    assert all(b - a == 2_000_000 for a, b in zip(sched, sched[1:]))  # the cadence, on the server's clock
    assert sched[0] - log["arrival_ns"][last] == 10_000_000  # TTFT from reading the request


def test_a_raw_reader_sees_tokens_arrive_apart():
    """Tokens 100 ms apart: a reader that waits with a short timeout gets them in separate reads (it would take a
    stall of 100 ms at every token for all to coalesce)."""
    with start_token_server(ttft_s=0.0, itl_s=0.1, max_lifetime_s=60) as s:
        host, port = _addr(s.url)
        with socket.create_connection((host, port), timeout=30) as c:
            c.sendall(_request("/v1/completions", {"prompt": "x", "max_tokens": 8, "stream": True}, host, port))
            c.settimeout(0.01)
            reads: list[bytes] = []
            buf = b""
            deadline = time.monotonic() + 20
            while not buf.endswith(b"0\r\n\r\n") and time.monotonic() < deadline:
                try:
                    d = c.recv(65536)
                except socket.timeout:
                    continue
                if not d:
                    break
                reads.append(d)
                buf += d
    per_read = [r.count(b'"text":" tok"') for r in reads]
    assert sum(per_read) == 8
    assert per_read.count(1) >= 2  # separate arrivals: the server wrote each token on its own


def test_partial_writes_when_the_client_does_not_read():
    with start_token_server(ttft_s=0.0, itl_s=0.0, emit_log=False, max_lifetime_s=120) as s:
        host, port = _addr(s.url)
        with socket.create_connection((host, port), timeout=60) as c:
            c.sendall(_request("/v1/completions", {"prompt": "x", "max_tokens": 100_000, "stream": True}, host, port))
            time.sleep(0.5)  # the server fills both socket buffers and must hold the rest
            _, chunks = _read_response(c)
        info = _get(s.url + "/harness/info")
    assert sum(p.count(b'"text":" tok"') for _, p in chunks) == 100_000 == info["tokens_total"]
    assert info["partial_token_writes"] > 0 and info["requests_finished"] == 1


@pytest.mark.parametrize("body, status, word", [
    ({"prompt": "x", "max_tokens": 0, "stream": True}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 3}, 400, "stream"),
    ({"max_tokens": 3, "stream": True}, 400, "prompt"),
])
def test_bad_requests_are_refused_naming_the_field(server, body, status, word):
    req = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == status and word in json.loads(e.value.read())["error"]["message"]


def test_other_routes(server):
    assert urllib.request.urlopen(server.url + "/health", timeout=30).read() == b"ok\n"
    assert "vllm:generation_tokens_total" in urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/nope", timeout=30)
    assert e.value.code == 404


@pytest.mark.parametrize("kw, flag", [({"ttft_s": -1.0}, "--ttft-s"), ({"itl_s": 100.0}, "--itl-s"), ({"cpu": 10_000}, "--cpu"),
                                      ({"port": 70000}, "--port"), ({"max_lifetime_s": 0.0}, "--max-lifetime-s")])
def test_bad_options_name_the_flag(kw, flag):
    with pytest.raises(UsageError, match=flag):
        ServerOptions(**kw)


def test_cli_bad_value_is_one_line_and_exit_1():
    p = subprocess.run([sys.executable, "-m", "harness.bench.token_server", "--itl-s", "-2"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stderr.startswith("error: --itl-s") and "Traceback" not in p.stderr


def test_pinned_to_a_core():
    with start_token_server(cpu=0, max_lifetime_s=60) as s:
        assert s.affinity == [0] and _get(s.url + "/harness/info")["affinity"] == [0]
