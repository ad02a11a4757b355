"""Scrape an engine's Prometheus `/metrics` page into rows (name, labels, value) for the store.

The text exposition format: `# HELP` / `# TYPE` comment lines, then `name{label="v",...} value
[timestamp]`. llama.cpp (with --metrics) exposes `llamacpp:prompt_tokens_total`,
`llamacpp:tokens_predicted_total`, `llamacpp:prompt_seconds_total`, ... ; vLLM `vllm:*`; SGLang
`sglang:*`. Names are kept as the engine writes them.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from harness.engines import http
from harness.errors import HarnessError


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    labels: dict[str, str]
    value: float
    type: str  # counter | gauge | histogram | summary | untyped

    def to_row(self, t_s: float, phase: str) -> dict[str, Any]:
        return {"t_s": t_s, "phase": phase, "name": self.name, "labels_json": json.dumps(self.labels, sort_keys=True),
                "value": self.value, "type": self.type}


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _float(tok: str) -> float:
    low = tok.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(tok)


def parse_prometheus(text: str) -> list[MetricSample]:
    """Parse the text exposition format; a malformed line raises HarnessError naming it."""
    types: dict[str, str] = {}
    out: list[MetricSample] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _LINE.match(line)
        if not m:
            raise HarnessError(f"/metrics line {n} is not Prometheus text format: {raw[:200]!r}")
        name, _, labels_s, value_s = m.group(1), m.group(2), m.group(3), m.group(4)
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(labels_s or "")}
        try:
            value = _float(value_s)
        except ValueError:
            raise HarnessError(f"/metrics line {n}: value {value_s!r} is not a number: {raw[:200]!r}") from None
        base = re.sub(r"_(bucket|sum|count|total)$", "", name)
        out.append(MetricSample(name, labels, value, types.get(name) or types.get(base, "untyped")))
    return out


@dataclass(frozen=True)
class Scrape:
    url: str
    t_s: float  # time.time() of the scrape
    samples: tuple[MetricSample, ...]
    raw: str

    def value(self, name: str) -> float | None:
        """The value of an unlabelled sample (or the sum over labels), None when absent."""
        vals = [s.value for s in self.samples if s.name == name]
        return sum(vals) if vals else None

    def rows(self, phase: str) -> list[dict[str, Any]]:
        return [s.to_row(self.t_s, phase) for s in self.samples]

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "t_s": self.t_s, "samples": [asdict(s) for s in self.samples]}


def scrape(base_url: str, path: str = "/metrics", timeout_s: float = 10.0) -> Scrape:
    """GET the metrics page; a 404/501 means metrics are off, and the error says how to turn them on."""
    url = base_url.rstrip("/") + path
    r = http.get(url, timeout_s=timeout_s)
    if r.status != 200:
        raise HarnessError(
            f"GET {url} answered HTTP {r.status} ({r.text[:200].strip()}); start the engine with metrics enabled "
            "(llama.cpp: metrics = true, i.e. --metrics; SGLang: enable_metrics = true)."
        )
    text = r.text
    return Scrape(url, time.time(), tuple(parse_prometheus(text)), text)
