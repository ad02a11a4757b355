"""An independent one-token-per-write SSE server for the load generator's speed benchmark (stdlib only, no harness code).

Real inference servers write one server-sent event per generated token; the embedded target (harness.target)
can write a stream whole, which flatters every client. This server is written apart from the harness on purpose
(raw non-blocking sockets and `selectors`, one thread) so the benchmark does not measure the load generator
against code that shares its assumptions:

* OpenAI-compatible streaming `POST /v1/chat/completions` and `/v1/completions` (`stream: true`;
  `stream_options.include_usage` adds a usage chunk with empty `choices` after the last token, as vLLM does),
  HTTP/1.1 keep-alive, chunked transfer encoding, exactly `max_tokens` tokens (" tok" each, finish_reason
  "length" on the last). The prompt's token count is its whitespace word count.
* **One SSE event per `send` call**: every token is one chunk (`<hex>\\r\\n<event>\\r\\n`) handed to the kernel by
  its own `socket.send`; usage and `[DONE]` (with the chunked terminator) follow as one write each. A send the
  kernel takes only in part (the client fell behind and the socket buffer is full) is finished when the socket
  is writable again, before that stream's next token; such tokens are counted (`partial_token_writes`).
* Fixed cadence: token k of a request is due at (request read) + TTFT + k * ITL (`--ttft-s`, `--itl-s`); the
  due instant is logged as `scheduled_ns`. A server behind its schedule writes due tokens oldest first, still
  one per write, so streams interleave instead of bursting.
* The emit stamp is `time.perf_counter_ns()` (CLOCK_MONOTONIC, the client's clock) taken immediately before the
  `send` that hands the token's last byte to the kernel. `GET /harness/emit_log` serves every token's stamp in
  the embedded target's format (`request_ids`, `request_index`, `token_index`, `emit_ns`, `scheduled_ns`, and per
  request `arrival_ns` = when its request was read whole), so the load generator's `fetch_emit_log` and the
  benchmark's error computation work unchanged. `GET /harness/info` has the counters (requests, tokens, send
  calls by kind, partial writes, the CPU affinity); `GET /metrics` has vLLM's counter names for tool_compare.
* `--cpu N` pins the process to core N (`os.sched_setaffinity`), so server and client can run on separate cores.

Run: python -m harness.bench.token_server --port 0 --ready-file F [--ttft-s 0.1 --itl-s 0.02 --cpu 1];
`start_token_server(...)` starts one as a child process bounded in time.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

perf_counter_ns = time.perf_counter_ns
EMIT_LOG_MAX_TOKENS = 20_000_000  # the log stops growing beyond this (and says so in dropped_tokens)
MAX_REQUEST_BYTES = 16 * 1024 * 1024
RECV_BYTES = 65536
SERVER_NAME = "harness-token-server"


class UsageError(Exception):
    """A bad command-line value: the message names the flag, the value and the fix."""


@dataclass(frozen=True)
class ServerOptions:
    ttft_s: float = 0.1
    itl_s: float = 0.02
    host: str = "127.0.0.1"
    port: int = 0
    cpu: int | None = None
    model_name: str = "token-server"
    max_lifetime_s: float = 3600.0
    emit_log: bool = True

    def __post_init__(self) -> None:
        for name, lo, hi in (("ttft_s", 0.0, 600.0), ("itl_s", 0.0, 60.0)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and lo <= v <= hi):
                raise UsageError(f"--{name.replace('_', '-')} must be from {lo:g} to {hi:g} seconds, got {v!r}.")
        if not (0 <= self.port <= 65535):
            raise UsageError(f"--port must be 0 (any free port) or 1..65535, got {self.port!r}.")
        if not self.max_lifetime_s > 0:
            raise UsageError(f"--max-lifetime-s must be > 0, got {self.max_lifetime_s!r}; give e.g. 3600.")
        n = os.cpu_count() or 1
        if self.cpu is not None and (isinstance(self.cpu, bool) or not isinstance(self.cpu, int) or not 0 <= self.cpu < n):
            raise UsageError(f"--cpu must be a core number from 0 to {n - 1} (this machine has {n}), got {self.cpu!r}.")


class EmitLog:
    """Per token: request, index, emit stamp, due instant; per request: id and when it was read."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.request_ids: list[str] = []
        self.arrival_ns = array("q")
        self.request_index = array("q")
        self.token_index = array("q")
        self.emit_ns = array("q")
        self.scheduled_ns = array("q")
        self.dropped = 0

    def add_request(self, rid: str, arrival_ns: int) -> int:
        self.request_ids.append(rid)
        self.arrival_ns.append(arrival_ns)
        return len(self.request_ids) - 1

    def add(self, req: int, k: int, emit_ns: int, scheduled_ns: int) -> None:
        if not self.enabled:
            return
        if len(self.emit_ns) >= EMIT_LOG_MAX_TOKENS:
            self.dropped += 1
            return
        self.request_index.append(req)
        self.token_index.append(k)
        self.emit_ns.append(emit_ns)
        self.scheduled_ns.append(scheduled_ns)

    def to_dict(self, since: int = 0) -> dict[str, Any]:
        return {"clock": "perf_counter_ns (CLOCK_MONOTONIC on Linux: comparable across processes of one host)",
                "stamp": "immediately before the send() that handed the token's last byte to the kernel",
                "request_ids": self.request_ids, "request_index": self.request_index[since:].tolist(),
                "token_index": self.token_index[since:].tolist(), "emit_ns": self.emit_ns[since:].tolist(),
                "scheduled_ns": self.scheduled_ns[since:].tolist(), "arrival_ns": self.arrival_ns.tolist(),
                "dropped_tokens": self.dropped, "enabled": self.enabled}


@dataclass
class Counters:
    requests_total: int = 0  # streaming requests accepted
    requests_finished: int = 0  # streams written to the end ([DONE] and the chunked terminator handed to the kernel)
    requests_cancelled: int = 0  # the client went away mid-stream
    requests_refused: int = 0  # answered 4xx
    prompt_tokens_total: int = 0
    tokens_total: int = 0  # content tokens handed to the kernel
    token_send_calls: int = 0  # send() calls that carried (part of) a content token
    other_send_calls: int = 0  # headers, usage, [DONE], other responses, and the rest of partial writes
    partial_token_writes: int = 0  # tokens the kernel took in more than one send (the client fell behind)


class Stream:
    __slots__ = ("conn", "log_index", "n", "k", "t0_ns", "itl_ns", "first", "mid", "last", "tail", "rid")

    def __init__(self, conn: "Conn", rid: str, log_index: int, n: int, t0_ns: int, itl_ns: int, frames: tuple[bytes, ...]):
        self.conn, self.rid, self.log_index, self.n, self.k = conn, rid, log_index, n, 0
        self.t0_ns, self.itl_ns = t0_ns, itl_ns
        self.first, self.mid, self.last, self.tail = frames


@dataclass
class Conn:
    sock: socket.socket
    rbuf: bytearray = field(default_factory=bytearray)
    wbuf: bytes = b""  # the unsent rest of a partial write
    stream: Stream | None = None
    pending_token: tuple[int, int] | None = None  # (token index, scheduled ns) of a token whose write is unfinished
    close_after: bool = False
    closed: bool = False


def frame(event: bytes) -> bytes:
    """One HTTP/1.1 chunk holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def stream_frames(rid: str, model: str, chat: bool, usage: dict[str, int] | None) -> tuple[bytes, bytes, bytes, bytes]:
    """(first token, middle token, last token, usage + [DONE] + terminator pieces joined per write) as chunks."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    head = ('data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":[{"index":0,'
            % (rid, kind, int(time.time()), json.dumps(model))).encode()

    def body(first: bool, fin: str) -> bytes:
        if chat:
            role = '"role":"assistant",' if first else ""
            return head + ('"delta":{%s"content":" tok"},"logprobs":null,"finish_reason":%s}]}\n\n' % (role, fin)).encode()
        return head + ('"text":" tok","logprobs":null,"finish_reason":%s}]}\n\n' % fin).encode()

    tail = b""
    if usage is not None:
        u = {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": [], "usage": usage}
        tail = frame(b"data: " + json.dumps(u, separators=(",", ":")).encode() + b"\n\n")
    return frame(body(True, "null")), frame(body(False, "null")), frame(body(False, '"length"')), tail


_DONE = frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\nServer: " + SERVER_NAME.encode() + b"\r\n\r\n")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
            413: "Content Too Large", 501: "Not Implemented"}


class TokenServer:
    def __init__(self, opts: ServerOptions, listener: socket.socket):
        self.opts = opts
        self.ttft_ns = int(round(opts.ttft_s * 1e9))
        self.itl_ns = int(round(opts.itl_s * 1e9))
        self.listener = listener
        self.sel = selectors.DefaultSelector()
        self.heap: list[tuple[int, int, Stream]] = []
        self.seq = 0
        self.log = EmitLog(opts.emit_log)
        self.c = Counters()
        self.running = 0
        self.started_ns = perf_counter_ns()
        self.deadline_ns = self.started_ns + int(opts.max_lifetime_s * 1e9)
        self.affinity = sorted(os.sched_getaffinity(0))

    # -- the loop ---------------------------------------------------------------------------------
    def serve(self) -> None:
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        heap, sel = self.heap, self.sel
        while True:
            now = perf_counter_ns()
            if now >= self.deadline_ns:
                return
            while heap and heap[0][0] <= now:
                _, _, s = heapq.heappop(heap)
                self._token(s, now)
                now = perf_counter_ns()
            if heap:
                wait_s = (heap[0][0] - now) / 1e9
                if wait_s > 0.0011:
                    events = sel.select(wait_s - 0.001)  # epoll rounds up to whole ms: wake before the due instant
                elif wait_s > 0:
                    time.sleep(wait_s)  # clock_nanosleep: sub-ms precise; sockets are polled right after
                    events = sel.select(0)
                else:
                    events = sel.select(0)
            else:
                events = sel.select(min(1.0, (self.deadline_ns - now) / 1e9))
            for key, mask in events:
                if key.data is None:
                    self._accept()
                    continue
                conn: Conn = key.data
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    self._drain(conn)
                if mask & selectors.EVENT_READ and not conn.closed:
                    self._read(conn)

    def _schedule(self, s: Stream) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (s.t0_ns + s.k * s.itl_ns, self.seq, s))

    # -- tokens ---------------------------------------------------------------------------------
    def _token(self, s: Stream, now: int) -> None:
        conn = s.conn
        if conn.closed or conn.stream is not s:
            return
        k = s.k
        data = s.first if k == 0 else s.last if k == s.n - 1 else s.mid
        sched = s.t0_ns + k * s.itl_ns
        s.k = k + 1
        if conn.wbuf:  # an earlier write (the headers) is unfinished: this token goes right after it, stamped then
            self.c.partial_token_writes += 1
            conn.wbuf += data
            conn.pending_token = (k, sched)
            return
        t = perf_counter_ns()
        try:
            sent = conn.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._gone(conn)
            return
        self.c.token_send_calls += 1
        if sent < len(data):  # the client fell behind: finish this token when writable, then go on
            self.c.partial_token_writes += 1
            conn.wbuf = data[sent:]
            conn.pending_token = (k, sched)
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            return
        self._token_done(s, k, t, sched)

    def _token_done(self, s: Stream, k: int, t_ns: int, sched: int) -> None:
        self.c.tokens_total += 1
        self.log.add(s.log_index, k, t_ns, sched)
        if s.k < s.n:
            self._schedule(s)
            return
        conn = s.conn  # the last token: usage (one write) and [DONE] + terminator (one write) follow at once
        for piece in (s.tail, _DONE):
            if piece:
                self._send(conn, piece)  # an unfinished write keeps the rest in wbuf; _drain ends the stream
            if conn.closed:
                return
        self._stream_end(conn)

    def _stream_end(self, conn: Conn) -> None:
        if conn.stream is None or conn.wbuf:
            return
        conn.stream = None
        self.running -= 1
        self.c.requests_finished += 1
        if conn.close_after:
            self._close(conn)
        elif conn.rbuf:
            self._parse(conn)

    def _send(self, conn: Conn, data: bytes) -> bool:
        """Write `data` (one send call); the rest, if the kernel took only part, goes when writable. False when the
        connection is gone or the write is unfinished (the caller resumes from _drain)."""
        if conn.wbuf:
            conn.wbuf += data
            return False
        try:
            sent = conn.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._gone(conn)
            return False
        self.c.other_send_calls += 1
        if sent < len(data):
            conn.wbuf = data[sent:]
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            return False
        return True

    def _drain(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.wbuf)
        except BlockingIOError:
            return
        except OSError:
            self._gone(conn)
            return
        t = perf_counter_ns()
        self.c.other_send_calls += 1
        conn.wbuf = conn.wbuf[sent:]
        if conn.wbuf:
            return
        self.sel.modify(conn.sock, selectors.EVENT_READ, conn)
        s = conn.stream
        if conn.pending_token is not None and s is not None:
            k, sched = conn.pending_token
            conn.pending_token = None
            self._token_done(s, k, t, sched)
        elif s is not None and s.k >= s.n:
            self._stream_end(conn)
        elif s is None and conn.close_after:
            self._close(conn)
        elif s is None and conn.rbuf:
            self._parse(conn)

    # -- connections and requests -----------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock)
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._gone(conn)
            return
        conn.rbuf += data
        if conn.stream is None and not conn.wbuf:
            self._parse(conn)
        elif len(conn.rbuf) > MAX_REQUEST_BYTES:
            self._gone(conn)

    def _gone(self, conn: Conn) -> None:
        if conn.stream is not None:
            self.c.requests_cancelled += 1
            self.running -= 1
            conn.stream = None
        self._close(conn)

    def _close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _parse(self, conn: Conn) -> None:
        """Handle every complete request in the read buffer while the connection is idle."""
        while conn.stream is None and not conn.wbuf and not conn.closed:
            buf = conn.rbuf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > 65536:
                    self._respond(conn, 400, {"error": {"message": "request head over 64 KiB"}}, close=True)
                return
            head = bytes(buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._respond(conn, 400, {"error": {"message": f"not an HTTP/1.x request line: {lines[0][:80]!r}"}}, close=True)
                return
            method, target, version = parts
            headers: dict[str, str] = {}
            for ln in lines[1:]:
                name, sep, value = ln.partition(":")
                if not sep:
                    self._respond(conn, 400, {"error": {"message": f"bad header line {ln[:80]!r}"}}, close=True)
                    return
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._respond(conn, 501, {"error": {"message": "chunked request bodies are not supported; send Content-Length"}},
                              close=True)
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                length = -1
            if length < 0 or length > MAX_REQUEST_BYTES:
                self._respond(conn, 413 if length > 0 else 400,
                              {"error": {"message": f"bad Content-Length {headers.get('content-length')!r}"}}, close=True)
                return
            if len(buf) < end + 4 + length:
                return  # the body is not here yet
            body = bytes(buf[end + 4:end + 4 + length])
            del buf[:end + 4 + length]
            conn.close_after = (headers.get("connection", "").lower() == "close" or version == "HTTP/1.0")
            self._dispatch(conn, method, target, body)

    def _dispatch(self, conn: Conn, method: str, target: str, body: bytes) -> None:
        path, _, query = target.partition("?")
        if path in ("/v1/chat/completions", "/v1/completions"):
            if method != "POST":
                self._respond(conn, 405, {"error": {"message": f"{path} takes POST"}})
                return
            self._completion(conn, path.endswith("/chat/completions"), body, perf_counter_ns())
            return
        if method != "GET":
            self._respond(conn, 405 if path in ("/health", "/metrics", "/v1/models", "/harness/info", "/harness/emit_log")
                          else 404, {"error": {"message": f"{method} {path} is not served"}})
            return
        if path == "/health":
            self._respond(conn, 200, b"ok\n", ctype="text/plain")
        elif path == "/v1/models":
            self._respond(conn, 200, {"object": "list", "data": [{"id": self.opts.model_name, "object": "model",
                                                                  "owned_by": SERVER_NAME}]})
        elif path == "/harness/info":
            self._respond(conn, 200, self.info())
        elif path == "/metrics":
            self._respond(conn, 200, self.metrics().encode(), ctype="text/plain; version=0.0.4")
        elif path == "/harness/emit_log":
            since = 0
            for kv in query.split("&"):
                if kv.startswith("since="):
                    try:
                        since = int(kv[6:])
                    except ValueError:
                        self._respond(conn, 400, {"error": {"message": "since must be an integer"}})
                        return
            self._respond(conn, 200, self.log.to_dict(since))
        else:
            self._respond(conn, 404, {"error": {"message": f"no route {path}"}})

    def _refuse(self, conn: Conn, message: str, param: str | None) -> None:
        self.c.requests_refused += 1
        self._respond(conn, 400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": 400}})

    def _completion(self, conn: Conn, chat: bool, raw: bytes, read_ns: int) -> None:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            self._refuse(conn, "request body is not valid JSON", None)
            return
        if not isinstance(body, dict):
            self._refuse(conn, "request body must be a JSON object", None)
            return
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                self._refuse(conn, "messages must be a non-empty list", "messages")
                return
            texts = []
            for m in msgs:
                c = m.get("content") if isinstance(m, dict) else None
                if isinstance(c, str):
                    texts.append(c)
                elif isinstance(c, list):
                    texts += [p.get("text", "") for p in c if isinstance(p, dict) and isinstance(p.get("text", ""), str)]
            text = " ".join(texts)
        else:
            text = body.get("prompt")
            if isinstance(text, list) and all(isinstance(x, str) for x in text):
                text = " ".join(text)
            if not isinstance(text, str):
                self._refuse(conn, "prompt must be a string", "prompt")
                return
        n = body.get("max_completion_tokens", body.get("max_tokens", 16))
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000_000:
            self._refuse(conn, f"max_tokens must be an integer from 1 to 10000000, got {n!r}", "max_tokens")
            return
        if body.get("stream") is not True:
            self._refuse(conn, "this server only streams: send \"stream\": true", "stream")
            return
        so = body.get("stream_options")
        include_usage = isinstance(so, dict) and bool(so.get("include_usage"))
        n_in = max(1, len(text.split()))
        self.c.requests_total += 1
        self.c.prompt_tokens_total += n_in
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        usage = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n} if include_usage else None
        model = body.get("model") if isinstance(body.get("model"), str) else self.opts.model_name
        frames = stream_frames(rid, model, chat, usage)
        s = Stream(conn, rid, self.log.add_request(rid, read_ns), n, read_ns + self.ttft_ns, self.itl_ns, frames)
        conn.stream = s
        self.running += 1
        self._send(conn, _STREAM_HEAD)  # headers at once, as real servers send them
        if not conn.closed:
            self._schedule(s)

    def _respond(self, conn: Conn, status: int, payload: Any, *, ctype: str = "application/json", close: bool = False) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\nServer: {SERVER_NAME}\r\n"
                + ("Connection: close\r\n" if close else "") + "\r\n").encode()
        conn.close_after = conn.close_after or close
        if self._send(conn, head + data) and conn.close_after:
            self._close(conn)

    # -- introspection ------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {"server": SERVER_NAME, "pid": os.getpid(), "one_event_per_send": True, "ttft_s": self.opts.ttft_s,
                "itl_s": self.opts.itl_s, "affinity": self.affinity, "requests_running": self.running,
                "emit_log_tokens": len(self.log.emit_ns), "uptime_s": (perf_counter_ns() - self.started_ns) / 1e9,
                "cpu_s": time.process_time(), **self.c.__dict__}

    def metrics(self) -> str:
        lbl = f'{{model_name="{self.opts.model_name}",engine="{SERVER_NAME}"}}'
        vals = {"vllm:num_requests_running": ("gauge", self.running),
                "vllm:num_requests_waiting": ("gauge", 0),
                "vllm:prompt_tokens_total": ("counter", self.c.prompt_tokens_total),
                "vllm:generation_tokens_total": ("counter", self.c.tokens_total),
                "vllm:request_success_total": ("counter", self.c.requests_finished)}
        out = []
        for name, (typ, v) in vals.items():
            out += [f"# TYPE {name} {typ}", f"{name}{lbl} {v}"]
        return "\n".join(out) + "\n"


def serve(opts: ServerOptions, ready_file: str | None = None) -> None:
    if opts.cpu is not None:
        try:
            os.sched_setaffinity(0, {opts.cpu})
        except OSError as exc:
            raise UsageError(f"--cpu {opts.cpu}: cannot run on that core ({exc}); give one of "
                             f"{', '.join(map(str, sorted(os.sched_getaffinity(0))))}.") from None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((opts.host, opts.port))
    listener.listen(1024)
    server = TokenServer(opts, listener)
    if ready_file:
        host, port = listener.getsockname()[:2]
        tmp = Path(ready_file + ".tmp")
        tmp.write_text(json.dumps({"url": f"http://{host}:{port}", "pid": os.getpid(), "affinity": server.affinity,
                                   "info": server.info()}))
        os.replace(tmp, ready_file)
    try:
        server.serve()
    finally:
        listener.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.bench.token_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ttft-s", type=float, default=0.1, help="time from reading a request to its first token's due instant")
    p.add_argument("--itl-s", type=float, default=0.02, help="cadence of the tokens (0: as fast as the server writes)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    p.add_argument("--cpu", type=int, default=None, help="pin the server to this core (os.sched_setaffinity)")
    p.add_argument("--model-name", default="token-server", help="model name in /v1/models (responses echo the request's)")
    p.add_argument("--no-emit-log", action="store_true", help="keep counters only, no per-token log")
    p.add_argument("--ready-file", default=None, help="write {url, pid, affinity, info} as JSON here once listening")
    p.add_argument("--max-lifetime-s", type=float, default=3600.0, help="exit after this many seconds regardless (a safety bound)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        opts = ServerOptions(ttft_s=args.ttft_s, itl_s=args.itl_s, host=args.host, port=args.port, cpu=args.cpu,
                             model_name=args.model_name, max_lifetime_s=args.max_lifetime_s, emit_log=not args.no_emit_log)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        serve(opts, args.ready_file)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}; give another --port (0: any free port).", file=sys.stderr)
        return 1
    return 0


@dataclass
class TokenServerProcess:
    url: str
    pid: int
    affinity: list[int]
    proc: subprocess.Popen = field(repr=False)
    log_path: Path = field(repr=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)

    def __enter__(self) -> "TokenServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_token_server(*, ttft_s: float = 0.1, itl_s: float = 0.02, cpu: int | None = None, emit_log: bool = True,
                       max_lifetime_s: float = 3600.0, startup_timeout_s: float = 30.0) -> TokenServerProcess:
    """Run the server as a child process on a free 127.0.0.1 port; returns once it listens."""
    ServerOptions(ttft_s=ttft_s, itl_s=itl_s, cpu=cpu, max_lifetime_s=max_lifetime_s)  # refuse bad values here, by name
    d = Path(tempfile.mkdtemp(prefix="token-server-"))
    ready, log = d / "ready.json", d / "server.log"
    cmd = [sys.executable, "-m", "harness.bench.token_server", "--ttft-s", repr(ttft_s), "--itl-s", repr(itl_s),
           "--ready-file", str(ready), "--max-lifetime-s", repr(max_lifetime_s)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    if not emit_log:
        cmd.append("--no-emit-log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if ready.exists():
            meta = json.loads(ready.read_text())
            return TokenServerProcess(meta["url"], meta["pid"], meta["affinity"], proc, log)
        if proc.poll() is not None:
            raise RuntimeError(f"the token server exited (code {proc.returncode}) before listening: {log.read_text()[-2000:]}")
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"the token server did not start within {startup_timeout_s:g} s; its log: {log}")


if __name__ == "__main__":
    raise SystemExit(main())
