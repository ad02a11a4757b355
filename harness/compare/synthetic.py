"""Synthetic load runs with known latency distributions, in exactly the stored format (tests, fixtures).

Requests arrive at a constant rate; each one's TTFT and inter-token gaps are log-normal around the
given medians, so a comparison of two such runs must find a shift exactly when the medians differ.
Records are built like workloads/records.py builds them, summarised with workloads.summary and
written with harness.store.RunWriter, the same path a real load run takes. Every manifest says it
is synthetic; nothing here measures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.records import new_manifest
from harness.store import RunWriter
from workloads.config import SummaryOptions
from workloads.summary import summarise


@dataclass(frozen=True)
class SyntheticLoad:
    ttft_median_s: float = 0.200
    itl_median_s: float = 0.020
    sigma: float = 0.25  # log-normal shape of TTFT and of each gap
    requests: int = 400
    rate_per_s: float = 4.0
    output_tokens: int = 32
    workload_hash: str = "synthetic-workload-0001"
    workload_name: str = "synthetic"
    scenario: str | None = "synthetic"
    engine: str = "synthetic-engine"
    engine_version: str = "1.0"
    slo_ttft_s: float | None = 0.5
    slo_tpot_s: float | None = 0.05


def write_synthetic_load_run(results_dir: str | Path, s: SyntheticLoad, seed: int = 0, run_id: str | None = None,
                             label: str | None = None, machine: str = "synthetic-load",
                             options: dict[str, Any] | None = None, engine_info: dict[str, Any] | None = None) -> Path:
    """Write one synthetic load run (manifest, requests table, summary.json); returns its directory. `options` are
    recorded as a bench-pd run records its options (manifest extra "options"); `engine_info` is added to the engine."""

    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(s.requests):
        intended = i / s.rate_per_s
        sent = intended + float(rng.uniform(0, 1e-4))
        ttft = s.ttft_median_s * float(np.exp(rng.normal(0, s.sigma)))
        gaps = s.itl_median_s * np.exp(rng.normal(0, s.sigma, s.output_tokens - 1))
        chunks = sent + ttft + np.concatenate([[0.0], np.cumsum(gaps)])
        last = float(chunks[-1]) + 1e-4
        ns = lambda t: int(round(t * 1e9))  # noqa: E731
        rows.append({
            "request_index": i, "session_id": i, "turn": 0, "worker_index": 0, "api": "chat",
            "intended_ns": ns(intended), "sent_ns": ns(sent), "first_byte_ns": ns(sent + ttft * 0.9),
            "first_token_ns": ns(chunks[0]), "last_byte_ns": ns(last), "chunk_ns": [ns(c) for c in chunks],
            "status": 200, "error_class": "ok", "error_detail": None, "prompt_tokens_target": 64,
            "max_tokens": s.output_tokens, "prompt_tokens_usage": 64, "output_tokens_usage": s.output_tokens,
            "output_tokens_chunks": s.output_tokens, "token_count_mismatch": False, "usage_missing": False,
            "finish_reason": "length", "response_id": f"syn-{seed}-{i}",
            "ttft_s": ttft, "ttft_from_intended_s": float(chunks[0]) - intended, "e2e_s": last - sent,
            "e2e_from_intended_s": last - intended, "tpot_s": float(chunks[-1] - chunks[0]) / (s.output_tokens - 1),
            "itl_mean_s": float(np.mean(gaps)), "schedule_lag_s": sent - intended, "body_bytes": 100 * s.output_tokens,
        })
    df = pd.DataFrame(rows)
    span_s = s.requests / s.rate_per_s
    summary = summarise(df, span_s=span_s, options=SummaryOptions(slo_ttft_s=s.slo_ttft_s, slo_tpot_s=s.slo_tpot_s))
    manifest = new_manifest(
        "load", run_id=run_id or f"synthetic-load-{seed:04d}", machine=machine, seeds={"synthetic": seed},
        command_line=["harness.compare.synthetic", str(seed)],
        engine={"name": s.engine, "version": s.engine_version, "simulated": True, **(engine_info or {})},
        notes=["synthetic load run generated from known distributions by harness.compare.synthetic; not a measurement"],
        extra={"synthetic": True, "constants": dataclasses.asdict(s), "scenario": s.scenario,
               "workload": {"name": s.workload_name, "content_hash": s.workload_hash, "requests": s.requests},
               **({"compare_label": label} if label else {}), **({"options": options} if options is not None else {})},
    )
    with RunWriter(manifest, results_dir) as w:
        w.append("requests", df)
        w.write_json("summary.json", {"load": summary.to_dict(), "span_s": span_s})
    return w.path
