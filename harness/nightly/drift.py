"""Drift of each constant against a rolling robust baseline: the median and MAD of its last N runs.

For the newest value x of a constant on a machine and the N values before it (the baseline):

    m = median(baseline)      MAD = median(|baseline − m|)      σ̂ = 1.4826 · MAD
    z = (x − m) / σ̂           change = x / m − 1

σ̂ is the MAD scaled to estimate a normal standard deviation (Rousseeuw & Croux 1993); unlike the
mean and standard deviation, one earlier outlier night moves neither m nor σ̂ much. The constant
has drifted when |z| > z_threshold AND |change| > min_change: the z-score alone would flag tiny
changes of a very steady constant, the change alone ordinary noise of a noisy one. With fewer than
min_history baseline values the constant is "warming up" and never flagged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from harness.errors import HarnessError

MAD_TO_SIGMA = 1.4826
Status = Literal["ok", "drift", "warming up"]


@dataclass(frozen=True)
class DriftOptions:
    baseline_runs: int = 10  # N
    min_history: int = 5
    z_threshold: float = 5.0
    min_change: float = 0.10  # 10 %

    def __post_init__(self) -> None:
        for f in ("baseline_runs", "min_history"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"--{f.replace('_', '-')} must be an integer >= 1, got {v!r}.")
        if self.min_history > self.baseline_runs:
            raise HarnessError(f"--min-history ({self.min_history}) cannot exceed --baseline-runs ({self.baseline_runs}).")
        if not (isinstance(self.z_threshold, (int, float)) and math.isfinite(self.z_threshold) and self.z_threshold > 0):
            raise HarnessError(f"--drift-z must be a positive number, got {self.z_threshold!r}.")
        if not (isinstance(self.min_change, (int, float)) and math.isfinite(self.min_change) and 0 <= self.min_change < 10):
            raise HarnessError(f"--drift-min-change must be a fraction >= 0 (0.1 = 10 %), got {self.min_change!r}.")


@dataclass(frozen=True)
class DriftResult:
    machine: str
    constant: str
    unit: str
    better: str
    run_id: str
    value: float
    baseline_median: float
    baseline_mad: float
    n_baseline: int
    z: float
    change_rel: float
    status: Status

    @property
    def direction(self) -> str:
        if self.status != "drift":
            return ""
        up = self.change_rel > 0
        return "better" if up == (self.better == "higher") else "worse"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "direction": self.direction}


def robust_z(x: float, baseline: np.ndarray) -> tuple[float, float, float]:
    """(median, MAD, z) of x against the baseline values; z is ±inf when MAD = 0 and x differs from the median."""
    m = float(np.median(baseline))
    mad = float(np.median(np.abs(baseline - m)))
    sigma = MAD_TO_SIGMA * mad
    if sigma > 0:
        z = (x - m) / sigma
    else:
        z = 0.0 if x == m else math.copysign(math.inf, x - m)
    return m, mad, z


def detect_drift(history: Any, options: DriftOptions | None = None, latest_run: str | None = None) -> list[DriftResult]:
    """One result per (machine, constant) present in the newest run (or in `latest_run`)."""
    o = options or DriftOptions()
    out: list[DriftResult] = []
    if history is None or len(history) == 0:
        return out
    h = history.sort_values(["created_unix_s", "run_id"], kind="stable")
    for (machine, constant), g in h.groupby(["machine", "constant"], sort=True):
        if latest_run is not None:
            idx = np.flatnonzero(g["run_id"].to_numpy() == latest_run)
            if idx.size == 0:
                continue
            pos = int(idx[-1])
        else:
            pos = len(g) - 1
        vals = g["value"].to_numpy(dtype=float)
        x = float(vals[pos])
        base = vals[max(0, pos - o.baseline_runs):pos]
        base = base[np.isfinite(base)]
        last = g.iloc[pos]
        if base.size < o.min_history or not math.isfinite(x):
            m = float(np.median(base)) if base.size else math.nan
            out.append(DriftResult(str(machine), str(constant), str(last["unit"]), str(last["better"]), str(last["run_id"]), x,
                                   m, math.nan, int(base.size), math.nan, x / m - 1 if m else math.nan, "warming up"))
            continue
        m, mad, z = robust_z(x, base)
        change = x / m - 1 if m else math.inf
        drift = abs(z) > o.z_threshold and abs(change) > o.min_change
        out.append(DriftResult(str(machine), str(constant), str(last["unit"]), str(last["better"]), str(last["run_id"]), x,
                               m, mad, int(base.size), z, change, "drift" if drift else "ok"))
    return out
