"""One streamed request on a socket of Locust's fast HTTP client pool (geventhttpclient), every body read time-stamped on arrival.

The request is written here, on a socket of the FastHttpUser's connection pool, in one `sendall` (its head is
built once per client, URI and header set); `sent` is stamped before the connection is checked out, `written`
right after the request's last byte was handed to the kernel. The checkout tests an idle connection with one
non-blocking peek instead of the pool's cooperative select, which yields to the hub before every request. The response head is read until its blank line,
then the head and every body read are fed to geventhttpclient's C parser (status, headers, chunked framing,
framing errors). Each body read is stamped with perf_counter_ns right after the read returns, before anything
else is done with it (geventhttpclient's `read(n)` would wait for n bytes and blur the arrival times); the events
the read completed are then decoded (workloads.sse.SSEParser).
On a plain socket a read waits on gevent's read watcher first and then reads once (`hub.wait`, then a
non-blocking `recv`), instead of gevent's `recv`, which reads, fails with EAGAIN, arms a timer for the socket's
timeout, waits and reads again: the whole request is bounded by one `gevent.Timeout`, so no per-read timer is
needed. (De-chunking in Python instead of the C parser was measured and dropped: equal CPU with one chunk per
read, twice the C parser's with 32 chunks per read.)

Every outcome ends as a record with an error class: ok, http_error, connect, timeout, reset
(connection closed mid-stream), protocol_error (broken HTTP framing), malformed_sse, early_done
([DONE] before any finish_reason), incomplete (body ended without [DONE]), server_error (an error
event in the stream), client_error (a bug on our side, with its message). The load run adds cancelled
(in flight when the run was stopped), not_sent and lost (workloads.records).
"""

from __future__ import annotations

import socket
from time import perf_counter_ns
from typing import Any

import gevent
import gevent.queue
import gevent.socket
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPResponse

from workloads.sse import SSEParser

# every error_class a request record can carry (the last three are written by the load process, not the client)
ERROR_CLASSES = ("ok", "http_error", "connect", "timeout", "reset", "protocol_error", "malformed_sse", "early_done",
                 "incomplete", "server_error", "client_error", "cancelled", "not_sent", "lost")
READ_BLOCK_BYTES = 65536
HEAD_MAX_BYTES = 65536  # a response head longer than this is a protocol error
_PLAIN_GET_SOCKET = ConnectionPool.get_socket
RAW_DETAIL_MAX_CHARS = 4096  # kept long here: the record masks the API key in it first, then cuts (workloads.records)


class HTTPFramingError(Exception):
    """Broken HTTP framing of a response head (the connection closed before it ended, or it is endless)."""


def _discard(resp: Any) -> None:
    """Close (not pool) the socket of a response that ended badly (the path through geventhttpclient's request)."""
    pool, sock = getattr(resp, "_pool", None), getattr(resp, "_sock", None)
    try:
        if sock is not None and pool is not None:
            pool.release_socket(sock)
        elif sock is not None:
            sock.close()
    finally:
        resp._sock = None
        resp._pool = None


_HEADS: dict[tuple[Any, ...], bytes] = {}


def request_head(http: Any, uri: str, headers: dict[str, str]) -> bytes:
    """The request line and headers up to `Content-Length: ` (the client's default headers, ours over them, Host),
    built once per client, URI and header set. A CR or LF in a header is refused (it would inject headers)."""
    key = (id(http), http.host, http.port, uri, tuple(headers.items()))
    head = _HEADS.get(key)
    if head is not None:
        return head
    if any(c in uri for c in "\r\n ") or not uri.startswith("/"):
        raise ValueError(f"invalid request URI {uri!r}")
    fields: dict[str, tuple[str, str]] = {}
    for k, v in list(getattr(http, "default_headers", {}).items()) + list(headers.items()):
        if any(c in f"{k}{v}" for c in "\r\n") or not k or ":" in k:
            raise ValueError(f"invalid header {k!r}")
        fields[k.lower()] = (k, str(v))
    if "host" not in fields:
        host = http.host if ":" not in http.host or http.host.startswith("[") else f"[{http.host}]"
        fields["host"] = ("Host", host if http.port in (80, 443) else f"{host}:{http.port}")
    for k in ("content-length", "transfer-encoding"):
        fields.pop(k, None)
    lines = [f"POST {uri} HTTP/1.1"] + [f"{k}: {v}" for k, v in fields.values()] + ["Content-Length: "]
    head = "\r\n".join(lines).encode("latin-1")
    if len(_HEADS) > 256:
        _HEADS.clear()
    _HEADS[key] = head
    return head


_POOL_PARTS = ("_semaphore", "_socket_queue", "_closed", "_create_socket")


def _alive(sock: Any) -> bool:
    """An idle pooled connection is usable when reading it would block: a peek that finds a FIN (b"") or stray bytes
    means the server closed it or left something behind. One non-blocking syscall, no trip through the hub."""
    raw = getattr(sock, "_sock", None)
    if raw is None or sock.fileno() < 0:
        return False
    try:
        raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _plain_pool(pool: Any) -> bool:
    """Whether `pool` is geventhttpclient's own ConnectionPool with the parts `checkout` and `preconnect` use (a
    subclass with its own get_socket, e.g. TLS wrapping, is left to its own methods)."""
    return (pool is not None and all(hasattr(pool, a) for a in _POOL_PARTS)
            and isinstance(pool._socket_queue, gevent.queue.Queue) and type(pool).get_socket is _PLAIN_GET_SOCKET)


def checkout(pool: Any) -> Any:
    """A socket of geventhttpclient's ConnectionPool, as `pool.get_socket()` gives it but without its cooperative
    `select()`, which yields to the hub (gevent.sleep(0)) so that every ready greenlet runs before this request is
    written; falls back to `get_socket()` on a pool that lacks the parts used here."""
    if not _plain_pool(pool):
        return pool.get_socket()
    pool._semaphore.acquire()
    if pool._closed:
        pool._semaphore.release()
        raise RuntimeError("connection pool closed")
    q = pool._socket_queue
    while q.qsize():
        sock = q.get(block=False)
        if _alive(sock):
            return sock
        try:
            sock.close()
        except OSError:
            pass
    try:
        return pool._create_socket()
    except BaseException:
        pool._semaphore.release()
        raise


PRECONNECT_MIN_LEAD_S = 0.005  # open a connection ahead only when the send is at least this far off
PRECONNECT_MARGIN_S = 0.001  # a connect ahead must end this long before the send instant, or it is abandoned


def preconnect(http: Any, lead_s: float) -> bool:
    """Open one idle connection in `http`'s pool ahead of a send that is `lead_s` away, when the pool has none.

    A load generator with one pool per user would otherwise open a TCP connection inside the TTFT of nearly every
    request at light load (every user's first request); a client with one shared keep-alive pool would not. On the
    project VM that connect cost ~0.3 ms at the median (sent -> written: 0.75 ms fresh vs 0.41 ms reused). The
    connection is checked at send time like any pooled one (`checkout`: a server that closed it meanwhile is seen and
    a new one opened then). A failure here is ignored: the request itself then connects and records the error.
    The connect is given `lead_s` − PRECONNECT_MARGIN_S at most, so a slow connect never delays the send: past that
    it is abandoned and the request connects at its send instant, as without a preconnect.
    Returns whether a connection was opened."""
    if lead_s < PRECONNECT_MIN_LEAD_S or getattr(http, "use_proxy", False):
        return False
    pool = getattr(http, "_connection_pool", None)
    if not _plain_pool(pool) or pool._closed or pool._socket_queue.qsize():
        return False
    q = pool._socket_queue
    sock = None
    with gevent.Timeout(lead_s - PRECONNECT_MARGIN_S, False):  # False: on expiry leave the block quietly, sock stays None
        try:
            sock = pool._create_socket()
        except Exception:  # noqa: BLE001 - the send will connect again and record what failed
            return False
    if sock is None:
        return False
    q.put(sock)  # idle sockets live in the queue; the semaphore counts the checked-out ones
    return True


def _reader(sock: Any) -> Any:
    """recv(n) for `sock`: on a plain gevent socket, wait on its read watcher first, then one non-blocking read (no
    EAGAIN round trip, no per-read timer: the request's gevent.Timeout bounds it); anything else (TLS): sock.recv."""
    if type(sock) is not gevent.socket.socket:
        return sock.recv
    raw = sock._sock
    raw_recv = raw.recv
    wait = sock.hub.wait
    watcher = sock._read_event

    def recv(n: int) -> bytes:
        while True:
            wait(watcher)
            try:
                return raw_recv(n)
            except BlockingIOError:  # a spurious wake-up
                continue

    return recv


def stream_request(http: Any, uri: str, payload: bytes, headers: dict[str, str], *, chat: bool, timeout_s: float,
                   keep_text: bool = False) -> dict[str, Any]:
    """POST `payload` to `uri` on geventhttpclient HTTPClient `http`; returns raw timings (absolute ns) and the parse
    (with the streamed text when `keep_text`: a live multi-turn session sends it back in its next turn)."""
    if getattr(http, "use_proxy", False):
        return _stream_via_client(http, uri, payload, headers, chat=chat, timeout_s=timeout_s, keep_text=keep_text)
    parser = SSEParser(chat, keep_text)
    feed = parser.feed
    last_t = 0
    total = 0
    reads = 0
    status = 0
    err: str | None = None
    detail = ""
    written = first_byte = None
    pool = http._connection_pool
    sock = None
    reusable = False
    sent = perf_counter_ns()
    timer = gevent.Timeout(timeout_s)
    timer.start()
    try:
        request = request_head(http, uri, headers) + b"%d\r\n\r\n" % len(payload) + payload
        sock = checkout(pool)
        sock.sendall(request)
        written = perf_counter_ns()
        recv = _reader(sock)
        head = b""
        while True:
            data = recv(READ_BLOCK_BYTES)
            if not data:
                raise HTTPFramingError("connection closed before the response head ended" if head else "connection closed.")
            head += data
            end = head.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(head) > HEAD_MAX_BYTES:
                raise HTTPFramingError("response head over 64 KiB")
        first_byte = perf_counter_ns()
        resp = HTTPResponse(method="POST")
        resp.feed(head[:end + 4])
        status = resp.status_code
        rest = head[end + 4:]
        if status != 200:  # an error response: keep the start of its body as the detail
            if rest:
                resp.feed(rest)
            body = bytearray()
            while True:
                body += resp._body_buffer
                del resp._body_buffer[:]
                if resp.message_complete or len(body) >= RAW_DETAIL_MAX_CHARS:
                    break
                data = recv(READ_BLOCK_BYTES)
                if not data:
                    break
                resp.feed(data)
            err = "http_error"
            detail = bytes(body)[:RAW_DETAIL_MAX_CHARS].decode("utf-8", "replace")
        else:  # chunked, Content-Length or close-delimited: geventhttpclient's C parser frames the body
            t = first_byte
            data = rest
            while True:
                if data:
                    resp.feed(data)
                    buf = resp._body_buffer
                    if buf:
                        piece = bytes(buf)
                        del buf[:]
                        total += len(piece)
                        last_t = t
                        feed(piece, t)
                    if resp.message_complete:
                        reusable = not resp.should_close()
                        break
                data = recv(READ_BLOCK_BYTES)
                t = perf_counter_ns()
                reads += 1
                if not data:
                    try:
                        resp.feed(b"")  # the end of a close-delimited body completes it
                    except Exception:  # noqa: BLE001 - a chunked or sized body cut short: the parser refuses the end
                        pass
                    if not resp.message_complete:
                        err, detail = "reset", "connection closed mid-stream"
                    break
    except gevent.Timeout as exc:
        if exc is not timer:
            raise
        err, detail = "timeout", f"no complete response within {timeout_s:g} s"
    except (ConnectionRefusedError, socket.gaierror) as exc:
        err, detail = "connect", str(exc)
    except socket.timeout as exc:
        err, detail = "timeout", f"{type(exc).__name__}: {exc}"
    except OSError as exc:  # ConnectionError and friends: before the request was written, a connect failure
        err = "connect" if written is None else "protocol_error" if first_byte is None else "reset"
        detail = f"{type(exc).__name__}: {exc}"
    except HTTPFramingError as exc:
        err, detail = "protocol_error", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - geventhttpclient's HTTPParseError and friends
        name = type(exc).__name__
        err = "protocol_error" if "Parse" in name or "HTTP" in name else "client_error"
        detail = f"{name}: {exc}"
    finally:
        timer.close()
        if sock is not None:
            if reusable and err is None:
                pool.return_socket(sock)
            else:
                pool.release_socket(sock)
    ended = perf_counter_ns()
    return _result(parser, sent, written, first_byte, last_t, ended, status, err, detail, total, reads)


def _result(parser: SSEParser, sent: int, written: int | None, first_byte: int | None, last_t: int, ended: int, status: int,
            err: str | None, detail: str, total: int, reads: int) -> dict[str, Any]:
    end = last_t or ended
    parse = parser.result() if total else None
    if err is None:
        if parse is None:
            err, detail = "incomplete", "empty body"
        elif parse.server_error:
            err, detail = "server_error", parse.server_error
        elif parse.malformed is not None:
            err, detail = "malformed_sse", f"undecodable event: {parse.malformed!r}"
        elif not parse.done_seen:
            err, detail = "incomplete", "stream ended without [DONE]"
        elif parse.finish_reason is None:
            err, detail = "early_done", f"[DONE] after {len(parse.content_ns)} content events and no finish_reason"
    return {"sent_ns": sent, "written_ns": written, "first_byte_ns": first_byte, "last_byte_ns": end,
            "ended_ns": ended if err else end, "status": status, "error_class": err or "ok",
            "error_detail": detail[:RAW_DETAIL_MAX_CHARS], "parse": parse, "body_bytes": total, "body_reads": reads}


def _stream_via_client(http: Any, uri: str, payload: bytes, headers: dict[str, str], *, chat: bool, timeout_s: float,
                       keep_text: bool = False) -> dict[str, Any]:
    """The same through geventhttpclient's own request (used behind a proxy, which needs its absolute URIs);
    `written` is then unknown (None): the request is written inside http.request."""
    parser = SSEParser(chat, keep_text)
    feed = parser.feed
    last_t = 0
    total = reads = 0
    status = 0
    err: str | None = None
    detail = ""
    first_byte = None
    resp = None
    sent = perf_counter_ns()
    timer = gevent.Timeout(timeout_s)
    timer.start()
    try:
        resp = http.request("POST", uri, body=payload, headers=headers)
        first_byte = perf_counter_ns()
        status = resp.status_code
        if status != 200:
            err = "http_error"
            detail = bytes(resp.read())[:RAW_DETAIL_MAX_CHARS].decode("utf-8", "replace")
        else:
            buf = resp._body_buffer
            if buf:
                piece = bytes(buf)
                del buf[:]
                total += len(piece)
                last_t = first_byte
                feed(piece, first_byte)
            sock = resp._sock
            while not resp.message_complete:
                if sock is None:
                    err, detail = "reset", "connection released before the body ended"
                    break
                data = sock.recv(READ_BLOCK_BYTES)
                t = perf_counter_ns()
                reads += 1
                if not data:
                    err, detail = "reset", "connection closed mid-stream"
                    break
                resp.feed(data)
                buf = resp._body_buffer
                if buf:
                    piece = bytes(buf)
                    del buf[:]
                    total += len(piece)
                    last_t = t
                    feed(piece, t)
    except gevent.Timeout as exc:
        if exc is not timer:
            raise
        err, detail = "timeout", f"no complete response within {timeout_s:g} s"
    except (ConnectionRefusedError, socket.gaierror) as exc:
        err, detail = "connect", str(exc)
    except (ConnectionError, socket.timeout, OSError) as exc:
        err, detail = ("connect" if first_byte is None and not isinstance(exc, socket.timeout) else
                       "timeout" if isinstance(exc, socket.timeout) else "reset"), f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - geventhttpclient's HTTPParseError and friends
        name = type(exc).__name__
        err = "protocol_error" if "Parse" in name or "HTTP" in name else "client_error"
        detail = f"{name}: {exc}"
    finally:
        timer.close()
        if err is not None and resp is not None:
            _discard(resp)
    return _result(parser, sent, None, first_byte, last_t, perf_counter_ns(), status, err, detail, total, reads)
