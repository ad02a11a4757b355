"""Light-load TTFT against the one-token-per-write server: each tool's client TTFT minus the server's own TTFT.

The server (harness.bench.token_server, emit log on) stamps when it had read each request whole (`arrival_ns`) and
immediately before the send of each token (`emit_ns`), on the host's CLOCK_MONOTONIC. Its TTFT of a request is
emit(token 0) − arrival. A tool's TTFT starts at its own send instant, so client − server TTFT is what the tool adds:
its request build and write, the kernel's loopback both ways, its wake-up and read of the first event.

Two ways to pair them, both reported:
* **matched** — per request, by the response id the server gave (`chatcmpl-…`/`cmpl-…`), where the tool records it
  (ours: `requests.response_id`; guidellm: `requests.successful[*].response_id`);
* **by quantile** — the tool's TTFT quantile minus the server TTFT's median, for a tool that records no response id
  (AIPerf's `profile_export.jsonl`). The server's TTFT spread (reported, `server_ttft_ms`) bounds what this loses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QUANTILES = (50, 90, 99)


def pct(values: Any) -> dict[str, Any]:
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if not len(a):
        return {"n": 0}
    return {"n": int(len(a)), **{f"p{q}": float(np.percentile(a, q)) for q in QUANTILES}, "max": float(a.max())}


def server_ttft_ms(emit_log: dict[str, Any]) -> dict[str, float]:
    """Response id -> the server's TTFT in ms (emit of token 0 − the instant its request was read whole)."""
    ids, arrival = emit_log["request_ids"], emit_log["arrival_ns"]
    out: dict[str, float] = {}
    for req, k, emit in zip(emit_log["request_index"], emit_log["token_index"], emit_log["emit_ns"]):
        if k == 0:
            out[ids[req]] = (emit - arrival[req]) / 1e6
    return out


def client_minus_server(client: list[tuple[str | None, float]], server: dict[str, float]) -> dict[str, Any]:
    """`client`: (response id or None, TTFT ms) per successful request of one tool; `server`: server_ttft_ms."""
    srv = np.array(list(server.values()), dtype=float)
    ttft = np.array([t for _, t in client], dtype=float)
    out: dict[str, Any] = {"client_ttft_ms": pct(ttft), "server_ttft_ms": pct(srv)}
    pairs = [t - server[r] for r, t in client if r is not None and r in server]
    if pairs:
        out["matched_ms"] = pct(pairs)
        out["matched_share"] = len(pairs) / len(client)
    if len(ttft) and len(srv):
        med = float(np.median(srv))
        out["by_quantile_ms"] = {k: v if k == "n" else v - med for k, v in pct(ttft).items()}
    return out
