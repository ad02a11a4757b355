"""Named constants of one night: one per microbenchmark case, and the fitted constants of a calibration.

Micro case  -> `<case_id>` with the case's achieved rate (FLOP/s when the case counted FLOPs, else
               bytes/s when it counted bytes, else its median time in s): the figure a person watches.
Calibration -> `cal/link/<key>/bandwidth_bytes_per_s`, `cal/link/<key>/alpha_s`, `cal/cpu_expert_flops_per_s`
               (C_C, §9.3.2), `cal/host_memory_bandwidth_bytes_per_s` (B_D), `cal/storage/<op>_bytes_per_s`,
               `cal/<quantity>/<device>/<dtype>@<x>` (efficiency curve points, §9.2.3), `cal/stage/...` rates.
Each row: constant, value, unit, better ("higher"/"lower"), source, n_samples, low, high.
"""

from __future__ import annotations

import math
from typing import Any

from harness.compare.runs import CASE_TABLES

COLUMNS = ("constant", "value", "unit", "better", "source", "n_samples", "low", "high")


def _row(constant: str, value: float, unit: str, better: str, source: str, n: int = 0,
         low: float = math.nan, high: float = math.nan) -> dict[str, Any]:
    return {"constant": constant, "value": float(value), "unit": unit, "better": better, "source": source,
            "n_samples": int(n), "low": float(low), "high": float(high)}


def micro_constants(run: Any) -> list[dict[str, Any]]:
    """One constant per valid case of a stored micro run (harness.store.Run)."""
    have = run.tables()
    name = next((n for n in CASE_TABLES if n in have), None)
    if name is None:
        return []
    out = []
    for _, c in run.table(name).iterrows():
        if not bool(c.get("valid", True)):
            continue
        med = float(c["median_s"])
        if not (med > 0 and math.isfinite(med)):
            continue
        n = int(c.get("n_samples", 0) or 0)
        p10, p90 = float(c.get("p10_s", math.nan)), float(c.get("p90_s", math.nan))
        flops, nbytes = float(c.get("useful_flops") or 0.0), float(c.get("useful_bytes") or 0.0)
        cid = str(c["case_id"])
        if flops > 0:
            out.append(_row(cid, flops / med, "FLOP/s", "higher", "micro", n, flops / p90, flops / p10))
        elif nbytes > 0:
            out.append(_row(cid, nbytes / med, "bytes/s", "higher", "micro", n, nbytes / p90, nbytes / p10))
        else:
            out.append(_row(cid, med, "s", "lower", "micro", n, p10, p90))
    return out


def calibration_constants(rec: Any) -> list[dict[str, Any]]:
    """The fitted constants of a CalibrationRecord, with their bootstrap intervals."""
    def est(name: str, e: Any, better: str) -> dict[str, Any]:
        return _row(name, e.value, e.unit, better, "calibration", e.n_samples, e.low, e.high)

    out = []
    for lf in rec.links:
        out.append(est(f"cal/link/{lf.key}/bandwidth_bytes_per_s", lf.bandwidth_bytes_per_s, "higher"))
        out.append(est(f"cal/link/{lf.key}/alpha_s", lf.alpha_s, "lower"))
    if rec.cpu_expert_flops_per_s:
        out.append(est("cal/cpu_expert_flops_per_s", rec.cpu_expert_flops_per_s, "higher"))
    if rec.host_memory_bandwidth_bytes_per_s:
        out.append(est("cal/host_memory_bandwidth_bytes_per_s", rec.host_memory_bandwidth_bytes_per_s, "higher"))
    for op, e in rec.storage.items():
        out.append(est(f"cal/storage/{op}_bytes_per_s", e, "higher"))
    for c in rec.curves:
        for p in c.points:
            out.append(_row(f"cal/{c.quantity}/{c.device}/{c.dtype}@{p.x:g}", p.measured.value, "fraction", "higher",
                            "calibration", p.measured.n_samples, p.measured.low, p.measured.high))
    for st in rec.stages:
        out.append(est(f"cal/stage/{st.case_id}", st.rate, "higher"))
    return out
