"""One measured case: what it counted (useful and padded FLOPs and bytes), its timing, and what follows.

Derived figures (Chapter 9, §9.2.3 and §1.2.2 as cited there: MFU and MBU are the fractions of the
spec peak that the model's own work reaches):

    flops_per_s = useful_flops / median_s        mfu = flops_per_s / peak_flops_per_s
    bytes_per_s = useful_bytes / median_s        mbu = bytes_per_s / peak_bytes_per_s

Padded counts (§9.4.3: rows a grouped GEMM pads up to its tile; bytes a two-pass kernel really
moves) are what the hardware executed. Neither useful nor padded work can exceed the peak: an
efficiency above 100% means the timing missed work (asynchronous work not waited for, data
served from a cache the count assumed cold) or the spec peak is wrong. Such a case is kept with
its numbers, flagged, and marked `valid=False`, never silently kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError
from microbench.timing import Measurement


@dataclass(frozen=True, slots=True)
class Work:
    """What one call of a case does, counted by the case: FLOPs (2 per multiply-add) and bytes."""

    useful_flops: float = 0.0
    useful_bytes: float = 0.0
    padded_flops: float | None = None  # None: the same as useful
    padded_bytes: float | None = None

    def __post_init__(self) -> None:
        for f in ("useful_flops", "useful_bytes", "padded_flops", "padded_bytes"):
            v = getattr(self, f)
            if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
                raise HarnessError(f"case work: {f} must be a finite number >= 0, got {v!r}.")
        if self.padded_flops is not None and self.padded_flops < self.useful_flops:
            raise HarnessError(f"case work: padded_flops ({self.padded_flops:g}) is below useful_flops ({self.useful_flops:g}); padding only adds work.")

    @property
    def hw_flops(self) -> float:
        return self.useful_flops if self.padded_flops is None else self.padded_flops

    @property
    def hw_bytes(self) -> float:
        return self.useful_bytes if self.padded_bytes is None else self.padded_bytes


@dataclass(frozen=True, slots=True)
class Peak:
    flops_per_s: float | None
    bytes_per_s: float | None
    source: str


@dataclass(frozen=True, slots=True)
class Derived:
    flops_per_s: float | None
    bytes_per_s: float | None
    mfu: float | None
    mbu: float | None
    flags: tuple[str, ...]
    valid: bool


def derive(work: Work, median_s: float, peak: Peak) -> Derived:
    """Achieved rates and efficiencies of one case; above-peak results are flagged and invalid."""
    if not (median_s > 0 and math.isfinite(median_s)):
        return Derived(None, None, None, None, (f"median time {median_s!r} is not a positive number: no rate derived",), False)
    flops_per_s = work.useful_flops / median_s if work.useful_flops else None
    bytes_per_s = work.useful_bytes / median_s if work.useful_bytes else None
    mfu = flops_per_s / peak.flops_per_s if flops_per_s and peak.flops_per_s else None
    mbu = bytes_per_s / peak.bytes_per_s if bytes_per_s and peak.bytes_per_s else None
    flags: list[str] = []
    for what, hw, pk in (("FLOP/s", work.hw_flops, peak.flops_per_s), ("bytes/s", work.hw_bytes, peak.bytes_per_s)):
        if hw and pk:
            ratio = hw / median_s / pk
            if ratio > 1.0:
                flags.append(
                    f"above_peak: {what} executed = {ratio:.0%} of the spec peak ({peak.source}); a measurement error "
                    "(work not waited for, inputs served from cache) or a wrong spec peak; case marked invalid"
                )
    return Derived(flops_per_s, bytes_per_s, mfu, mbu, tuple(flags), not flags)


@dataclass(frozen=True)
class CaseResult:
    suite: str
    case: str  # unique within the suite, carries the size: "qkv-t512"
    backend: str  # "torch" | "numpy" | an importer's tool name
    device: str  # "cpu" | "cuda:0" | ...
    dtype: str
    params: dict[str, Any]
    work: Work
    measurement: Measurement
    peak: Peak
    cache_state: str = ""
    notes: tuple[str, ...] = field(default=())
    source: str = "harness"  # "harness" or the imported tool
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # extra rows stored with the run (e.g. micro_kernels)

    @property
    def case_id(self) -> str:
        return f"{self.suite}:{self.case}:{self.backend}:{self.device}:{self.dtype}"

    @property
    def derived(self) -> Derived:
        return derive(self.work, self.measurement.stats.median_s, self.peak)

    @property
    def flags(self) -> tuple[str, ...]:
        out = list(self.derived.flags)
        if self.measurement.unstable:
            out.append(f"unstable: {self.measurement.remedy}")
        return (*out, *self.measurement.notes, *self.notes)

    def to_row(self) -> dict[str, Any]:
        s, d = self.measurement.stats, self.derived
        nan = float("nan")
        return {
            "case_id": self.case_id, "suite": self.suite, "case": self.case, "backend": self.backend,
            "device": self.device, "dtype": self.dtype, "params_json": json.dumps(self.params, sort_keys=True, default=str),
            "n_samples": s.n, "inner_reps": self.measurement.inner_reps,
            "median_s": s.median_s, "p10_s": s.p10_s, "p90_s": s.p90_s, "mean_s": s.mean_s, "min_s": s.min_s, "cv": s.cv,
            "useful_flops": float(self.work.useful_flops), "padded_flops": float(self.work.hw_flops),
            "useful_bytes": float(self.work.useful_bytes), "padded_bytes": float(self.work.hw_bytes),
            "flops_per_s": d.flops_per_s if d.flops_per_s is not None else nan,
            "bytes_per_s": d.bytes_per_s if d.bytes_per_s is not None else nan,
            "mfu": d.mfu if d.mfu is not None else nan, "mbu": d.mbu if d.mbu is not None else nan,
            "peak_flops_per_s": self.peak.flops_per_s if self.peak.flops_per_s else nan,
            "peak_bytes_per_s": self.peak.bytes_per_s if self.peak.bytes_per_s else nan,
            "peak_source": self.peak.source, "timer": self.measurement.timer, "cache_state": self.cache_state,
            "unstable": bool(self.measurement.unstable), "valid": bool(d.valid),
            "flags_json": json.dumps(list(self.flags)), "source": self.source,
            "sm_clock_hz": self.measurement.sm_clock_hz if self.measurement.sm_clock_hz is not None else nan,
            "mem_clock_hz": self.measurement.mem_clock_hz if self.measurement.mem_clock_hz is not None else nan,
        }

    def sample_rows(self) -> list[dict[str, Any]]:
        m = self.measurement
        return [{"case_id": self.case_id, "rep": i, "time_s": t, "inner_reps": m.inner_reps} for i, t in enumerate(m.times_s)]

    def to_dict(self) -> dict[str, Any]:
        row = self.to_row()
        row["params"] = self.params
        row["flags"] = list(self.flags)
        del row["params_json"], row["flags_json"]
        return row


@dataclass(frozen=True, slots=True)
class Skip:
    """A case the suite could not run here, and why (recorded, never silently dropped)."""

    suite: str
    case: str
    reason: str

    def to_row(self) -> dict[str, str]:
        return {"suite": self.suite, "case": self.case, "reason": self.reason}
