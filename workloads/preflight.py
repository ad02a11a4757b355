"""Pre-flight check of a target before a load run: GET /v1/models, then one short streamed request.

A run against a closed port, a wrong path, a missing key or a wrong model name would otherwise send
every request into an error and report it minutes later. Each failure names the URL and what failed.
The short request is a real one (max_tokens 1, a few words), so it also checks the model name and the key;
it is not part of the run's records.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError

SIMULATED_HEADER_NAME = "X-Harness-Simulated"  # sent as "true" by every simulated target (harness.target.server)


@dataclass(frozen=True)
class PreflightResult:
    models: list[str]
    model_listed: bool
    stream_ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {"models": self.models, "model_listed": self.model_listed, "stream_ok": self.stream_ok}


def _open(req: urllib.request.Request, url: str, what: str, timeout_s: float) -> bytes:
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:  # noqa: S310 - the URL was checked to be http(s)
            return r.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()[:300].decode("utf-8", "replace")
        hint = " (the API key is missing or wrong: --api-key-env NAME)" if exc.code in (401, 403) else ""
        raise HarnessError(f"pre-flight: {what} {url} answered HTTP {exc.code}{hint}: {body or exc.reason}") from None
    except urllib.error.URLError as exc:
        raise HarnessError(f"pre-flight: cannot reach {url} for {what} ({exc.reason}); is the server up, and is the URL "
                           "(host, port, http/https) right?") from None
    except (TimeoutError, OSError) as exc:
        raise HarnessError(f"pre-flight: {what} {url} failed ({type(exc).__name__}: {exc}).") from None


def simulated_target(base_url: str, *, api_key: str | None = None, timeout_s: float = 30.0) -> dict[str, Any] | None:
    """What a target that says it is simulated (SIMULATED_HEADER_NAME: true on GET /v1/models) says of itself: its
    /harness/info ({} when it has none); None when it does not say so, or cannot be reached (the pre-flight reports that)."""
    headers = {"User-Agent": "llm-dist-harness", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base_url}/v1/models", headers=headers), timeout=timeout_s) as r:  # noqa: S310
            if (r.headers.get(SIMULATED_HEADER_NAME) or "").strip().lower() != "true":
                return None
    except (urllib.error.URLError, OSError, ValueError):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base_url}/harness/info", headers=headers), timeout=timeout_s) as r:  # noqa: S310
            info = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def time_one_request(base_url: str, *, model: str, api: str, prompt: str, max_tokens: int, api_key: str | None = None,
                     timeout_s: float = 120.0, extra_body: dict[str, Any] | None = None) -> float:
    """Wall seconds one streamed request of this prompt and length takes alone (not part of any run's records)."""
    headers = {"User-Agent": "llm-dist-harness", "Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "stream": True, **(extra_body or {})}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    url = base_url + path
    t0 = time.perf_counter()
    _open(urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers), url,
          "POST (timing one request)", timeout_s)
    return time.perf_counter() - t0


def preflight(base_url: str, *, model: str, api: str = "chat", api_key: str | None = None, timeout_s: float = 30.0,
              extra_body: dict[str, Any] | None = None) -> PreflightResult:
    """Check `base_url` serves /v1/models and answers one short streamed request; HarnessError says what failed."""
    headers = {"User-Agent": "llm-dist-harness", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    models_url = f"{base_url}/v1/models"
    raw = _open(urllib.request.Request(models_url, headers=headers), models_url, "GET", timeout_s)
    try:
        ids = [str(m.get("id")) for m in json.loads(raw).get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError):
        raise HarnessError(f"pre-flight: GET {models_url} did not return an OpenAI model list (JSON with 'data'); "
                           "is this an OpenAI-compatible server?") from None
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    url = base_url + path
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True},
                            **(extra_body or {})}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "the of and"}]
    else:
        body["prompt"] = "the of and"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={**headers, "Content-Type": "application/json", "Accept": "text/event-stream"})
    text = _open(req, url, "POST", timeout_s).decode("utf-8", "replace")
    if "data:" not in text:
        raise HarnessError(f"pre-flight: POST {url} answered without a server-sent event stream: {text[:200]!r}")
    if '"error"' in text and '"choices"' not in text:
        raise HarnessError(f"pre-flight: POST {url} streamed an error: {text[:300]}")
    if model not in ids and ids:
        # servers differ on whether the name must match a listed id; the request worked, so this is a note, not an error
        pass
    return PreflightResult(ids, model in ids, True)
