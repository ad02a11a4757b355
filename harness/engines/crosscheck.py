"""Cross-check a load run's client-side view against the engine's own counters, per run.

The load generator (workloads/, `harness bench-pd`) records each request as the client saw it:
TTFT, E2E, usage token counts and streamed chunks. llama.cpp counts the same work itself
(`/metrics`, --metrics): prompt tokens processed and cached, prompt-processing seconds, tokens
generated and their seconds, decode calls. Scraped right before and right after the run, the
counter deltas give the engine's totals for exactly that run; each row below puts one client
total next to the engine's and states what a difference means.

The first generated token is sampled from the prompt pass, so llama.cpp counts it in
`tokens_predicted_total` but its time in `prompt_seconds_total`; the client's decode time
(E2E − TTFT) likewise covers the tokens after the first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.engines.metrics import Scrape
from harness.errors import HarnessError

LLAMA_CPP_COUNTERS = {
    "prompt_tokens": "llamacpp:prompt_tokens_total",
    "prompt_tokens_cached": "llamacpp:prompt_tokens_cached_total",
    "prompt_s": "llamacpp:prompt_seconds_total",
    "predicted_tokens": "llamacpp:tokens_predicted_total",
    "predicted_s": "llamacpp:tokens_predicted_seconds_total",
    "decode_calls": "llamacpp:n_decode_total",
}


@dataclass(frozen=True)
class CrossRow:
    quantity: str
    client: float | None
    engine: float | None
    difference: float | None  # client - engine
    relative: float | None  # difference / engine
    meaning: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _delta(before: Scrape, after: Scrape, name: str) -> float | None:
    a, b = after.value(name), before.value(name)
    return None if a is None or b is None else a - b


def _row(q: str, client: float | None, engine: float | None, meaning: str) -> CrossRow:
    if client is None or engine is None:
        return CrossRow(q, client, engine, None, None, meaning)
    diff = client - engine
    return CrossRow(q, client, engine, diff, diff / engine if engine else None, meaning)


def crosscheck_llama_cpp(requests: Any, before: Scrape, after: Scrape) -> list[CrossRow]:
    """Rows comparing the `requests` table of a load run (pandas) with llama.cpp counter deltas."""
    for col in ("error_class", "prompt_tokens_usage", "output_tokens_usage", "output_tokens_chunks", "ttft_s", "e2e_s"):
        if col not in requests.columns:
            raise HarnessError(f"the load run's requests table has no column {col!r}; it was not written by workloads/ of this harness.")
    ok = requests[requests["error_class"] == "ok"]
    n = len(ok)
    missing = [k for k, name in LLAMA_CPP_COUNTERS.items() if after.value(name) is None]
    if missing:
        raise HarnessError(
            f"llama.cpp /metrics lacks {', '.join(LLAMA_CPP_COUNTERS[k] for k in missing)}; start it with metrics = true (--metrics)."
        )
    d = {k: _delta(before, after, name) for k, name in LLAMA_CPP_COUNTERS.items()}
    rows = [
        _row("requests ok / all", float(n), float(len(requests)), "requests that ended with an error are left out of the client totals"),
        _row("prompt tokens (usage) vs processed + cached", float(ok["prompt_tokens_usage"].sum()),
             (d["prompt_tokens"] or 0) + (d["prompt_tokens_cached"] or 0),
             "non-zero: requests the engine processed but the client did not count as ok (errors), or other clients"),
        _row("output tokens (usage) vs generated", float(ok["output_tokens_usage"].sum()), d["predicted_tokens"],
             "non-zero: usage under- or over-reports, or the engine generated for requests the client dropped"),
        _row("output tokens (streamed chunks) vs usage", float(ok["output_tokens_chunks"].sum()), float(ok["output_tokens_usage"].sum()),
             "non-zero: several tokens per chunk, or empty chunks (reasoning/whitespace) counted differently"),
        _row("mean TTFT vs mean prompt time [s]", float(ok["ttft_s"].mean()) if n else None,
             (d["prompt_s"] / n) if n and d["prompt_s"] is not None else None,
             "client TTFT − engine prompt time = queueing for a slot + HTTP + tokenization + first sampling"),
        _row("decode time Σ(E2E − TTFT) vs generation time [s]", float((ok["e2e_s"] - ok["ttft_s"]).sum()), d["predicted_s"],
             "client − engine = stream delivery and the time a request's decode waits behind other slots' prompts"),
        _row("mean decode batch (tokens per decode call)", None,
             (d["predicted_tokens"] / d["decode_calls"]) if d["decode_calls"] else None,
             "engine only: how many slots each decode call served on average"),
    ]
    return rows


def render_rows(rows: list[CrossRow]) -> str:
    out = ["| quantity | client | engine | client − engine | relative | meaning |", "|---|---|---|---|---|---|"]
    for r in rows:
        f = (lambda v: "—" if v is None else f"{v:.4g}")
        rel = "—" if r.relative is None else f"{r.relative:+.1%}"
        out.append(f"| {r.quantity} | {f(r.client)} | {f(r.engine)} | {f(r.difference)} | {rel} | {r.meaning} |")
    return "\n".join(out) + "\n"
