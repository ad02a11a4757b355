"""Latency of each request as the embedded target scheduled it, in its simulated seconds (from its emit log).

The embedded target logs, per request, the instant it reached the engine (`arrival_ns`) and, per token, the
instant the engine scheduled it (`scheduled_ns`), both on the shared perf_counter clock. The simulated engine
chains its steps in simulated time, so these latencies are the model's, whatever the machine's load: the
client's wall-clock figures (divided by time_scale) also carry every scheduling delay of a busy machine,
multiplied by 1 / time_scale. Requests are matched to the client's records by response id.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import numpy as np


def fetch_emit_log(url: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """GET {url}/harness/emit_log of a running embedded target."""
    with urllib.request.urlopen(url.rstrip("/") + "/harness/emit_log", timeout=timeout_s) as r:  # noqa: S310 - our own target
        return json.loads(r.read())


def target_latency(log: dict[str, Any], time_scale: float) -> Any:
    """One row per streamed request that reached the engine: response_id, tokens, and ttft_s, tpot_s, e2e_s in
    simulated seconds (first / last scheduled token minus arrival; tpot over the tokens after the first)."""
    # lazy: pandas adds ~0.5 s to sweep's start-up; only the stored table uses it
    import pandas as pd

    ids = log["request_ids"]
    arrival = np.asarray(log.get("arrival_ns") or [-1] * len(ids), dtype=np.int64)
    ri = np.asarray(log["request_index"], dtype=np.int64)
    sched = np.asarray(log["scheduled_ns"], dtype=np.int64)
    if not len(ri):
        return pd.DataFrame(columns=["response_id", "tokens", "ttft_s", "tpot_s", "e2e_s"])
    tok = pd.DataFrame({"r": ri, "s": sched}).groupby("r")["s"].agg(["min", "max", "count"])
    tok = tok[arrival[tok.index.to_numpy()] >= 0]
    a = arrival[tok.index.to_numpy()]
    scale = 1e9 * time_scale
    n = tok["count"].to_numpy()
    first, last = tok["min"].to_numpy(), tok["max"].to_numpy()
    return pd.DataFrame({
        "response_id": np.asarray(ids, dtype=object)[tok.index.to_numpy()],
        "tokens": n,
        "ttft_s": (first - a) / scale,
        "tpot_s": np.where(n > 1, (last - first) / np.maximum(n - 1, 1) / scale, np.nan),
        "e2e_s": (last - a) / scale,
    })


def latency_percentiles(df: Any, response_ids: Any = None) -> dict[str, dict[str, float | None]]:
    """p50 / p95 / p99 of ttft_s, tpot_s, e2e_s of `df` (target_latency), over `response_ids` when given."""
    if response_ids is not None:
        df = df[df["response_id"].isin(set(response_ids))]
    out: dict[str, dict[str, float | None]] = {}
    for m in ("ttft_s", "tpot_s", "e2e_s"):
        a = df[m].dropna().to_numpy(dtype=float) if len(df) else np.zeros(0)
        out[m.removesuffix("_s")] = ({"count": int(a.size), **{f"p{q}": float(np.percentile(a, q)) for q in (50, 95, 99)}}
                                     if a.size else {"count": 0, "p50": None, "p95": None, "p99": None})
    return out
