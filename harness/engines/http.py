"""A small OpenAI-compatible HTTP client for engines: JSON requests and timed SSE streams (stdlib only).

Times are perf_counter seconds measured from just before the request is sent: `ttft_s` is the
arrival of the first chunk carrying generated text, `chunk_times_s` every such arrival, `e2e_s`
the end of the stream. These are the client-side metrics; the engine's own view (llama.cpp's
`timings`) is kept beside them, untouched, so the two can be compared.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from harness.errors import HarnessError


class EngineUnreachable(HarnessError):
    """The engine did not answer at all (connection refused, reset, timed out)."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    elapsed_s: float

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except json.JSONDecodeError:
            raise HarnessError(
                f"engine answered HTTP {self.status} with a body that is not JSON: {self.body[:200]!r}"
            ) from None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def _connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    u = urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        raise HarnessError(f"engine URL {url!r} must be http://host:port/path.")
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout_s)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    return conn, path


def request(method: str, url: str, body: Any = None, timeout_s: float = 30.0) -> HttpResponse:
    """One request; a JSON-able `body` is sent as JSON. Raises EngineUnreachable when nothing answers."""
    conn, path = _connection(url, timeout_s)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    t0 = time.perf_counter()
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise EngineUnreachable(f"{method} {url} got no answer: {exc}") from None
    finally:
        conn.close()
    return HttpResponse(resp.status, payload, time.perf_counter() - t0)


def get(url: str, timeout_s: float = 30.0) -> HttpResponse:
    return request("GET", url, None, timeout_s)


def post_json(url: str, body: Any, timeout_s: float = 120.0) -> HttpResponse:
    return request("POST", url, body, timeout_s)


@dataclass(frozen=True)
class StreamResult:
    """One streamed completion as the client saw it, plus what the engine reported about itself."""

    status: int
    ttft_s: float | None  # send -> first chunk with generated text
    e2e_s: float  # send -> end of stream
    chunk_times_s: tuple[float, ...]  # arrival of each chunk with generated text, since send
    text: str
    finish_reason: str | None
    usage: dict[str, Any] | None  # the OpenAI `usage` object (needs stream_options.include_usage)
    timings: dict[str, Any] | None  # llama.cpp's own `timings` (prompt_ms, predicted_ms, ...), if sent
    error: str | None = None  # an error body or an `error` event, verbatim
    n_events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False  # the client closed the stream before its end (`stream(stop=...)`): no usage, no final timings

    @property
    def itl_s(self) -> tuple[float, ...]:
        """Gaps between successive chunks with text (inter-token latency when one token per chunk)."""
        t = self.chunk_times_s
        return tuple(b - a for a, b in zip(t, t[1:]))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["itl_s"] = list(self.itl_s)
        return d


def _events(resp: http.client.HTTPResponse) -> Iterator[str]:
    """`data:` payloads of a server-sent event stream, one per event."""
    buf: list[str] = []
    while True:
        raw = resp.readline()
        if not raw:
            if buf:
                yield "\n".join(buf)
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if buf:
                yield "\n".join(buf)
                buf = []
            continue
        if line.startswith("data:"):
            buf.append(line[5:].lstrip())
        elif line.startswith("error:"):  # llama.cpp sends `error: {...}` lines on failures
            buf.append(json.dumps({"error": line[6:].strip()}))


def _text_of(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return (delta.get("content") or "") + (delta.get("reasoning_content") or "")
    return choice.get("text") or ""


def stream(url: str, body: dict[str, Any], timeout_s: float = 300.0,
           on_content: Callable[[float], None] | None = None, stop: threading.Event | None = None) -> StreamResult:
    """POST `body` with stream=true to an OpenAI-compatible endpoint and time every chunk; `on_content(seconds since
    send)` is called as each chunk with generated text arrives (e.g. to send another request once this one decodes).
    When `stop` is set, the stream is closed at the next event (llama-server then cancels the request) and the result
    says `stopped`: it has no usage and no final timings."""
    body = {**body, "stream": True}
    body.setdefault("stream_options", {"include_usage": True})
    conn, path = _connection(url, timeout_s)
    t0 = time.perf_counter()
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            payload = resp.read()
            return StreamResult(resp.status, None, time.perf_counter() - t0, (), "", None, None, None,
                                error=payload.decode("utf-8", "replace"))
        times: list[float] = []
        parts: list[str] = []
        usage = timings = None
        finish = error = None
        n = 0
        stopped = False
        for data in _events(resp):
            now = time.perf_counter() - t0
            if data.strip() == "[DONE]":
                break
            if stop is not None and stop.is_set() and finish is None:
                stopped = True
                break
            n += 1
            try:
                ev = json.loads(data)
            except json.JSONDecodeError:
                error = f"event is not JSON: {data[:200]!r}"
                continue
            if "error" in ev:
                error = json.dumps(ev["error"]) if not isinstance(ev["error"], str) else ev["error"]
                continue
            if ev.get("usage"):
                usage = ev["usage"]
            if ev.get("timings"):
                timings = ev["timings"]
            for ch in ev.get("choices") or []:
                piece = _text_of(ch)
                if piece:
                    parts.append(piece)
                    times.append(now)
                    if on_content is not None:
                        on_content(now)
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
        e2e = time.perf_counter() - t0
    except (OSError, http.client.HTTPException) as exc:
        raise EngineUnreachable(f"POST {url} (stream) failed: {exc}") from None
    finally:
        conn.close()
    return StreamResult(200, times[0] if times else None, e2e, tuple(times), "".join(parts), finish, usage, timings,
                        error=error, n_events=n, stopped=stopped)
