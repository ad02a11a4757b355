"""One streamed request on Locust's fast HTTP client (geventhttpclient), every body read time-stamped on arrival.

The request goes through the FastHttpUser's connection pool; after the headers, the body is read
straight from the socket and each read is stamped with perf_counter_ns before anything else is
done with it (geventhttpclient's `read(n)` would wait for n bytes and blur the arrival times);
the events the read completed are then decoded (workloads.sse.SSEParser).
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

from workloads.sse import SSEParser

# every error_class a request record can carry (the last three are written by the load process, not the client)
ERROR_CLASSES = ("ok", "http_error", "connect", "timeout", "reset", "protocol_error", "malformed_sse", "early_done",
                 "incomplete", "server_error", "client_error", "cancelled", "not_sent", "lost")
READ_BLOCK_BYTES = 65536
RAW_DETAIL_MAX_CHARS = 4096  # kept long here: the record masks the API key in it first, then cuts (workloads.records)


def _discard(resp: Any) -> None:
    """Close (not pool) the socket of a response that ended badly."""
    pool, sock = getattr(resp, "_pool", None), getattr(resp, "_sock", None)
    try:
        if sock is not None and pool is not None:
            pool.release_socket(sock)
        elif sock is not None:
            sock.close()
    finally:
        resp._sock = None
        resp._pool = None


def stream_request(http: Any, uri: str, payload: bytes, headers: dict[str, str], *, chat: bool, timeout_s: float) -> dict[str, Any]:
    """POST `payload` to `uri` on geventhttpclient HTTPClient `http`; returns raw timings (absolute ns) and the parse."""
    parser = SSEParser(chat)
    feed = parser.feed
    last_t = 0
    total = 0
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
    ended = perf_counter_ns()
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
    return {"sent_ns": sent, "first_byte_ns": first_byte, "last_byte_ns": end, "ended_ns": ended if err else end, "status": status,
            "error_class": err or "ok", "error_detail": detail[:RAW_DETAIL_MAX_CHARS], "parse": parse, "body_bytes": total}
