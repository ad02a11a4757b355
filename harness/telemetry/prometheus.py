"""Prometheus /metrics scraping about once a second, with vLLM, SGLang and llama.cpp names mapped to one vocabulary.

Canonical names (per endpoint role: "all", "prefill", "decode"):
  queue_depth        vllm:num_requests_waiting   sglang:num_queue_reqs      llamacpp:requests_deferred
  running            vllm:num_requests_running   sglang:num_running_reqs    llamacpp:requests_processing
  kv_usage_frac      vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc (0–1)  sglang:token_usage  llamacpp:kv_cache_usage_ratio
  prefix_hits_tokens_total     vllm:prefix_cache_hits_total (sglang and llama.cpp: none)
  prefix_queries_tokens_total  vllm:prefix_cache_queries_total
  prefix_hit_rate    vllm:gpu_prefix_cache_hit_rate (older vLLM)  sglang:cache_hit_rate
  prompt_tokens_total          vllm:prompt_tokens_total   sglang:prompt_tokens_total   llamacpp:prompt_tokens_total
  generation_tokens_total      vllm:generation_tokens_total  sglang:generation_tokens_total  llamacpp:tokens_predicted_total
A scrape that fails is a row with its error, never an exception: a run goes on without telemetry.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

CANONICAL: dict[str, str] = {
    "vllm:num_requests_waiting": "queue_depth",
    "sglang:num_queue_reqs": "queue_depth",
    "llamacpp:requests_deferred": "queue_depth",
    "vllm:num_requests_running": "running",
    "sglang:num_running_reqs": "running",
    "llamacpp:requests_processing": "running",
    "vllm:kv_cache_usage_perc": "kv_usage_frac",
    "vllm:gpu_cache_usage_perc": "kv_usage_frac",
    "sglang:token_usage": "kv_usage_frac",
    "llamacpp:kv_cache_usage_ratio": "kv_usage_frac",
    "vllm:prefix_cache_hits_total": "prefix_hits_tokens_total",
    "vllm:prefix_cache_queries_total": "prefix_queries_tokens_total",
    "vllm:gpu_prefix_cache_hit_rate": "prefix_hit_rate",
    "sglang:cache_hit_rate": "prefix_hit_rate",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "llamacpp:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "llamacpp:tokens_predicted_total": "generation_tokens_total",
}
# vLLM v1 exposes kv_cache_usage_perc and keeps gpu_cache_usage_perc as a deprecated alias; keep one
_ALIASES = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_text(text: str) -> list[Sample]:
    """Samples of the Prometheus text exposition format (comments and malformed lines are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group(3) or "")}
        out.append(Sample(m.group(1), labels, value))
    return out


def canonical_rows(samples: list[Sample]) -> dict[str, float]:
    """Canonical name -> value summed over label sets (e.g. several model names) for the known metrics."""
    out: dict[str, float] = {}
    seen_alias_target = {s.name for s in samples if s.name in _ALIASES.values()}
    for s in samples:
        if s.name in _ALIASES and _ALIASES[s.name] in seen_alias_target:
            continue
        c = CANONICAL.get(s.name)
        if c is not None:
            out[c] = out.get(c, 0.0) + s.value
    return out


def scrape_once(url: str, timeout_s: float = 2.0) -> tuple[dict[str, float], str | None]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - http(s) checked by the caller
            text = r.read().decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - any failure becomes a row, not a crash
        return {}, f"{type(exc).__name__}: {exc}"[:200]
    return canonical_rows(parse_text(text)), None


@dataclass
class Scraper:
    """Scrape each (role, url) every `interval_s` on a background thread (a greenlet under gevent).

    Rows: t_s (seconds since the run's t0), role, url, metric, value, error. `sink(rows)` is called with each
    batch so they can be appended to the run in parts.
    """

    endpoints: list[dict[str, str]]
    sink: Callable[[list[dict[str, Any]]], None]
    interval_s: float = 1.0
    t0_fn: Callable[[], float] | None = None  # returns the run's t0 in perf_counter seconds (default: start time)
    flush_every: int = 10
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _rows: list[dict[str, Any]] = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    scrapes: int = field(default=0, init=False)
    errors: int = field(default=0, init=False)

    def start(self) -> None:
        if not self.endpoints:
            return
        if self.t0_fn is None:
            t0 = time.perf_counter()
            self.t0_fn = lambda: t0
        self._thread = threading.Thread(target=self._loop, name="prometheus-scraper", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_t = time.monotonic()
        n = 0
        while not self._stop.is_set():
            for ep in self.endpoints:
                t = time.perf_counter() - self.t0_fn()  # type: ignore[misc]
                values, err = scrape_once(ep["url"], timeout_s=min(2.0, self.interval_s * 2))
                self.scrapes += 1
                with self._lock:
                    if err:
                        self.errors += 1
                        self._rows.append({"t_s": t, "role": ep["role"], "url": ep["url"], "metric": None, "value": None, "error": err})
                    for k, v in values.items():
                        self._rows.append({"t_s": t, "role": ep["role"], "url": ep["url"], "metric": k, "value": v, "error": None})
            n += 1
            if n % self.flush_every == 0:
                self.flush()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
        if rows:
            self.sink(rows)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.flush()
