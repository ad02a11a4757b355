"""GPU telemetry of a load run summarised per phase (startup, steady, drain; workloads.phases) and per GPU.

Per source, role, host and GPU, and per phase: samples, mean utilisation, mean and lowest SM clock, mean memory
clock, mean and highest power, highest memory used, highest GPU and HBM temperature, and the share of samples whose
clock-event reasons say the clocks were held down for heat or power (with the reasons seen); `None` where the source
does not report the field. Errors are counted per endpoint. Pure: computed from the stored `gpu_metrics` table, so
a report renders it from the run alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.telemetry.gpu_sample import IDLE_BIT, THROTTLE_BITS, throttle_names
from workloads.phases import PHASES, LoadPhases


@dataclass(frozen=True)
class GpuPhaseRow:
    source: str
    role: str
    host: str
    gpu: str
    phase: str
    samples: int
    util_mean_frac: float | None
    sm_clock_mean_hz: float | None
    sm_clock_min_hz: float | None
    mem_clock_mean_hz: float | None
    power_mean_w: float | None
    power_max_w: float | None
    memory_used_max_bytes: float | None
    temperature_max_c: float | None
    memory_temperature_max_c: float | None
    throttled_frac: float | None  # of the samples whose reasons are known and that were not idle
    throttle_reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GpuTelemetrySummary:
    phases: dict[str, Any]  # LoadPhases as a dict
    rows: list[GpuPhaseRow]
    errors: dict[str, dict[str, Any]]  # endpoint -> {"count", "first"}
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(x: Any) -> float | None:
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def _agg(x: Any, fn: Any) -> float | None:
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    return float(fn(a)) if a.size else None


def summarise_gpu(df: Any, phases: LoadPhases) -> GpuTelemetrySummary:
    """`df`: the run's gpu_metrics table (pandas)."""
    errors: dict[str, dict[str, Any]] = {}
    bad = df[df["error"].notna()] if len(df) else df
    for ep, g in (bad.groupby("endpoint") if len(bad) else []):
        errors[str(ep)] = {"count": int(len(g)), "first": str(g["error"].iloc[0]), "first_t_s": float(g["t_s"].iloc[0])}
    good = df[df["error"].isna()].copy() if len(df) else df
    rows: list[GpuPhaseRow] = []
    if len(good):
        good["phase"] = phases.phase_of(good["t_s"].to_numpy(dtype=float))
        for keys, g in good.groupby(["source", "role", "host", "gpu"], dropna=False, sort=True):
            for ph in PHASES:
                s = g[g["phase"] == ph]
                if not len(s):
                    continue
                reasons = s["throttle_reasons"].dropna().astype("int64").to_numpy()
                busy = reasons[(reasons & IDLE_BIT) == 0]
                seen = sorted({n for bits in np.unique(busy) for n in throttle_names(int(bits))})
                rows.append(GpuPhaseRow(
                    *(str(k) if k is not None and k == k else "" for k in keys), ph, int(len(s)),
                    _mean(s["util_frac"]), _mean(s["sm_clock_hz"]), _agg(s["sm_clock_hz"], np.min), _mean(s["mem_clock_hz"]),
                    _mean(s["power_w"]), _agg(s["power_w"], np.max), _agg(s["memory_used_bytes"], np.max),
                    _agg(s["temperature_c"], np.max), _agg(s["memory_temperature_c"], np.max),
                    float(((busy & THROTTLE_BITS) != 0).mean()) if busy.size else None, seen))
    return GpuTelemetrySummary(phases.to_dict(), rows, errors, int(len(good)))


def summary_lines(s: GpuTelemetrySummary) -> list[str]:
    """Plain lines: one per GPU and phase, then one per failing endpoint."""
    out = []
    for r in s.rows:
        def f(v: float | None, scale: float, unit: str, fmt: str = ".0f") -> str:
            return "—" if v is None else f"{v * scale:{fmt}}{unit}"

        thr = ("—" if r.throttled_frac is None else f"{r.throttled_frac:.0%}" + (f" ({', '.join(r.throttle_reasons)})"
                                                                               if r.throttle_reasons else ""))
        out.append(f"GPU {r.host}/{r.gpu} ({r.source}, {r.role}) {r.phase}: util {f(r.util_mean_frac, 100, ' %')}, SM clock "
                   f"{f(r.sm_clock_mean_hz, 1e-6, ' MHz')} (min {f(r.sm_clock_min_hz, 1e-6, ' MHz')}), power "
                   f"{f(r.power_mean_w, 1, ' W')} (max {f(r.power_max_w, 1, ' W')}), memory used max "
                   f"{f(r.memory_used_max_bytes, 2**-30, ' GiB', '.1f')}, temperature max {f(r.temperature_max_c, 1, ' C')}, "
                   f"throttled {thr}; {r.samples} samples")
    for ep, e in s.errors.items():
        out.append(f"GPU telemetry from {ep}: {e['count']} failed reads (first at {e['first_t_s']:.1f} s: {e['first']})")
    return out
