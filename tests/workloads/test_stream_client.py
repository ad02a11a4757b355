"""workloads.stream_client against raw-socket servers: the request it writes, every framing of the body (one byte per
write included), keep-alive reuse, and each error class of a broken response. No monkey patching: the client uses
gevent sockets, each server is a plain OS thread."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from workloads.stream_client import request_head, stream_request


def _event(text: str | None = None, fin: str | None = None, usage: bool = False) -> bytes:
    obj = {"id": "r-1", "object": "chat.completion.chunk",
           "choices": [] if usage else [{"index": 0, "delta": {"content": text}, "finish_reason": fin}]}
    if usage:
        obj["usage"] = {"prompt_tokens": 2, "completion_tokens": 3}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


EVENTS = [_event(" a"), _event(" b"), _event(" c", "length"), _event(usage=True), b"data: [DONE]\n\n"]
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(events: list[bytes], terminator: bytes = b"0\r\n\r\n") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + terminator


class RawServer:
    """Answers each request read on a connection with `respond(request_bytes, conn)`; counts connections."""

    def __init__(self, respond):
        self.respond = respond
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed = 0  # connections this server has closed (loopback: the FIN is at the client once this counts it)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.connections += 1
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        buf = b""
        try:
            while not self.stop:
                while b"\r\n\r\n" not in buf:
                    d = conn.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, rest = buf.partition(b"\r\n\r\n")
                n = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
                while len(rest) < n:
                    rest += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:n])
                buf = rest[n:]
                if self.respond(self.requests[-1], conn) == "close":
                    return
        except OSError:
            return
        finally:
            conn.close()
            self.closed += 1

    def close(self) -> None:
        self.stop = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def serve():
    servers = []

    def make(respond):
        s = RawServer(respond)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def _run(url: str, n: int = 1, headers: dict | None = None, timeout_s: float = 10.0) -> list[dict]:
    http = HTTPClient.from_url(URL(url + "/"), concurrency=2, network_timeout=60, connection_timeout=10)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    return [stream_request(http, "/v1/chat/completions", body, headers or {"Content-Type": "application/json"}, chat=True,
                           timeout_s=timeout_s) for _ in range(n)]


def _ok(r: dict, events: int = 3) -> None:
    assert r["error_class"] == "ok", r["error_detail"]
    assert len(r["parse"].content_ns) == events and r["parse"].output_tokens_usage == 3 and r["parse"].finish_reason == "length"
    assert r["sent_ns"] <= r["written_ns"] <= r["first_byte_ns"] <= r["parse"].content_ns[0] <= r["last_byte_ns"]


def test_request_bytes_and_keep_alive(serve):
    srv = serve(lambda req, c: c.sendall(CHUNKED_HEAD + chunked(EVENTS)))
    res = _run(srv.url, 3, headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
    for r in res:
        _ok(r)
    assert srv.connections == 1  # one connection, reused
    head, _, body = srv.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    fields = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    assert fields["host"] == srv.url.split("://")[1] and fields["authorization"] == "Bearer k"
    assert int(fields["content-length"]) == len(body) and json.loads(body)["stream"] is True


def test_one_byte_per_write_every_boundary(serve):
    def respond(req, c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in CHUNKED_HEAD + chunked(EVENTS):
            c.sendall(bytes([b]))
            time.sleep(0.0002)  # (how the reads coalesce depends on the machine; the result must not)
    srv = serve(respond)
    (r,) = _run(srv.url)
    _ok(r)


def test_extensions_trailers_and_several_events_per_chunk(serve):
    body = (b"5;ext=1\r\n" + EVENTS[0][:5] + b"\r\n" + b"%x\r\n%s\r\n" % (len(EVENTS[0]) - 5, EVENTS[0][5:])
            + b"%x\r\n%s\r\n" % (len(b"".join(EVENTS[1:])), b"".join(EVENTS[1:])) + b"0\r\nX-Trailer: 1\r\n\r\n")
    srv = serve(lambda req, c: c.sendall(CHUNKED_HEAD.replace(b"chunked", b"chunked\r\nTrailer: X-Trailer") + body))
    res = _run(srv.url, 2)
    for r in res:
        _ok(r)
    assert srv.connections == 1


def test_content_length_and_close_delimited_bodies(serve):
    raw = b"".join(EVENTS)
    srv = serve(lambda req, c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw))
    for r in _run(srv.url, 2):
        _ok(r)
    srv2 = serve(lambda req, c: (c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + raw), "close")[1])
    for r in _run(srv2.url, 2):
        _ok(r)
    assert srv2.connections == 2  # not reused after a close-delimited body


def test_a_pooled_connection_the_server_closed_is_replaced(serve):
    # keep-alive by its headers, but the server closes each connection after answering: the next checkout must see
    # the FIN and connect anew instead of writing into a dead socket
    srv = serve(lambda req, c: (c.sendall(CHUNKED_HEAD + chunked(EVENTS)), time.sleep(0.05), "close")[2])
    http = HTTPClient.from_url(URL(srv.url + "/"), concurrency=1)
    body = json.dumps({"stream": True}).encode()
    for i in range(3):
        r = stream_request(http, "/v1/chat/completions", body, {}, chat=True, timeout_s=10.0)
        _ok(r)
        deadline = time.monotonic() + 30
        while srv.closed <= i and time.monotonic() < deadline:
            time.sleep(0.01)
    assert srv.connections == 3


def test_checkout_does_not_go_through_the_pools_select(serve, monkeypatch):
    from geventhttpclient.connectionpool import ConnectionPool

    srv = serve(lambda req, c: c.sendall(CHUNKED_HEAD + chunked(EVENTS)))
    http = HTTPClient.from_url(URL(srv.url + "/"), concurrency=1)
    monkeypatch.setattr(ConnectionPool, "_is_socket_alive", lambda self, sock: pytest.fail("the pool's select was used"))
    for _ in range(2):  # the second request takes the pooled socket
        _ok(stream_request(http, "/v1/chat/completions", b"{}", {}, chat=True, timeout_s=10.0))
    assert srv.connections == 1


def test_connection_close_is_not_reused(serve):
    srv = serve(lambda req, c: (c.sendall(CHUNKED_HEAD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
                                          + chunked(EVENTS)), "close")[1])
    for r in _run(srv.url, 2):
        _ok(r)
    assert srv.connections == 2


@pytest.mark.parametrize("name, respond, cls", [
    ("bad chunk size", lambda req, c: c.sendall(CHUNKED_HEAD + b"zz\r\n" + EVENTS[0]), "protocol_error"),
    ("chunk without CRLF", lambda req, c: c.sendall(CHUNKED_HEAD + b"%x\r\n%sXX" % (len(EVENTS[0]), EVENTS[0])), "protocol_error"),
    ("closed mid-chunk", lambda req, c: (c.sendall(CHUNKED_HEAD + b"%x\r\n%s" % (len(EVENTS[0]) + 9, EVENTS[0])), "close")[1],
     "reset"),
    ("closed before a head", lambda req, c: "close", "protocol_error"),
    ("closed mid-head", lambda req, c: (c.sendall(b"HTTP/1.1 200 OK\r\nContent-"), "close")[1], "protocol_error"),
    ("garbage head", lambda req, c: c.sendall(b"NOT HTTP\r\n\r\n"), "protocol_error"),
    ("no [DONE]", lambda req, c: c.sendall(CHUNKED_HEAD + chunked(EVENTS[:-1])), "incomplete"),
    ("malformed event", lambda req, c: c.sendall(CHUNKED_HEAD + chunked([EVENTS[0], b"data: {nope\n\n", *EVENTS[1:]])), "malformed_sse"),
    ("http 500", lambda req, c: c.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nbroke"), "http_error"),
    ("stall", lambda req, c: (c.sendall(CHUNKED_HEAD + chunked(EVENTS[:1], b"")), time.sleep(3))[0], "timeout"),
])
def test_error_classes(serve, name, respond, cls):
    srv = serve(respond)
    (r,) = _run(srv.url, timeout_s=1.0)
    assert r["error_class"] == cls, (name, r["error_detail"])
    if cls == "http_error":
        assert r["status"] == 500 and r["error_detail"] == "broke"


def test_refused_connection_is_connect():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    (r,) = _run(f"http://127.0.0.1:{port}")
    assert r["error_class"] == "connect" and r["written_ns"] is None


def test_header_injection_is_refused():
    http = HTTPClient.from_url(URL("http://127.0.0.1:9/"), concurrency=1)
    with pytest.raises(ValueError):
        request_head(http, "/v1/completions", {"X-Bad": "a\r\nInjected: 1"})
    (r,) = [stream_request(http, "/v1/completions", b"{}", {"X-Bad": "a\r\nb"}, chat=False, timeout_s=1.0)]
    assert r["error_class"] == "client_error"


def test_preconnect_opens_one_idle_connection_that_the_request_then_uses(serve):
    from workloads.stream_client import PRECONNECT_MIN_LEAD_S, preconnect

    srv = serve(lambda req, c: c.sendall(CHUNKED_HEAD + chunked(EVENTS)))
    http = HTTPClient.from_url(URL(srv.url + "/"), concurrency=2)
    assert not preconnect(http, PRECONNECT_MIN_LEAD_S / 2)  # too close to the send: nothing opened
    assert preconnect(http, 1.0)
    assert not preconnect(http, 1.0)  # the pool has an idle connection now
    deadline = time.monotonic() + 10
    while srv.connections < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.connections == 1 and srv.requests == []  # connected ahead, nothing sent yet
    _ok(stream_request(http, "/v1/chat/completions", b"{}", {}, chat=True, timeout_s=10.0))
    assert srv.connections == 1  # the request went out on the connection opened ahead


def test_a_preconnected_connection_the_server_closed_is_replaced_at_send(serve):
    from workloads.stream_client import preconnect

    srv = serve(lambda req, c: c.sendall(CHUNKED_HEAD + chunked(EVENTS)))
    http = HTTPClient.from_url(URL(srv.url + "/"), concurrency=1)
    assert preconnect(http, 1.0)
    sock = http._connection_pool._socket_queue.peek()
    sock.close()  # as if the server had dropped it while the user slept
    _ok(stream_request(http, "/v1/chat/completions", b"{}", {}, chat=True, timeout_s=10.0))


def test_a_slow_preconnect_is_abandoned_before_the_send_instant(serve):
    """A connect that takes longer than the lead must not delay the send: it is given lead − margin, then dropped."""
    import gevent

    from workloads.stream_client import preconnect

    srv = serve(lambda req, c: c.sendall(CHUNKED_HEAD + chunked(EVENTS)))
    http = HTTPClient.from_url(URL(srv.url + "/"), concurrency=1)
    pool = http._connection_pool
    real = pool._create_socket
    pool._create_socket = lambda: (gevent.sleep(5.0), real())[1]  # a connect that hangs for 5 s
    t0 = time.monotonic()
    assert not preconnect(http, 0.05)
    assert time.monotonic() - t0 < 2.0  # back at about the lead (50 ms), far before the 5-s connect would end
    assert pool._socket_queue.qsize() == 0  # nothing half-open was left in the pool
    pool._create_socket = real
    _ok(stream_request(http, "/v1/chat/completions", b"{}", {}, chat=True, timeout_s=10.0))  # the send connects itself


def test_preconnect_to_a_closed_port_is_silent_and_the_request_records_connect():
    from workloads.stream_client import preconnect

    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    http = HTTPClient.from_url(URL(f"http://127.0.0.1:{port}/"), concurrency=1, connection_timeout=2)
    assert not preconnect(http, 1.0)
    assert stream_request(http, "/v1/chat/completions", b"{}", {}, chat=True, timeout_s=5.0)["error_class"] == "connect"
