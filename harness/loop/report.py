"""The loop's result record: constants, stage and served predictions, measurements, comparisons (versioned JSON).

LOOP_REPORT_SCHEMA_VERSION format history:
1 — unversioned loop_report.json (stages only: prefill, TTFT, decode at batch B).
2 — schema_version, status, served-load points (twin prediction vs load generator), capacity, verdict, twin spec.
3 — stage windows (the isolated stages measured several times over the loop: harness.loop.windows), the windows each
    served point was predicted from, the verdict per window mode; request checks carry their window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.loop.calibrate import CpuConstants
from harness.loop.compare import Comparison, ServedComparison, Verdict
from harness.loop.measure import Measured, RequestCheck, ServedMeasurement
from harness.loop.predict import Predicted

LOOP_REPORT_SCHEMA_VERSION = 3


@dataclass(frozen=True)
class ServedPoint:
    """One (mix, rate) point: what the twin predicted for the seeded workload and what the engine served."""

    mix: str
    point: int
    input_tokens: int
    output_tokens: int
    rate_per_s: float
    rate_fraction_of_capacity: float
    requests: int
    predicted: dict[str, Any]  # ServedFigures.to_dict()
    measured: dict[str, Any] | None  # ServedMeasurement.to_dict(), None when not measured (yet)
    simulate_s: float  # wall seconds the prediction took
    step_scale: float = 1.0  # the twin's step times × this for the point (host speed probe; 1: no probe)
    stage_windows: tuple[int, ...] = (0,)  # the stage windows whose corrections (combined) made the twin that predicted it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoopReport:
    model: dict[str, Any]
    engine: dict[str, Any]
    constants: CpuConstants
    predicted: tuple[Predicted, ...]
    measured: tuple[Measured, ...]
    comparisons: tuple[Comparison, ...]
    checks: tuple[RequestCheck, ...]
    settings: dict[str, Any]
    run_dir: str | None = None
    notes: tuple[str, ...] = field(default=())
    status: str = "complete"  # complete | failed (partial: what was measured before the failure)
    error: str | None = None
    twin: dict[str, Any] | None = None  # TwinSpec.to_dict()
    capacity: dict[str, dict[str, float]] = field(default_factory=dict)  # mix -> {requests_per_s, output_tokens_per_s}
    served: tuple[ServedPoint, ...] = ()
    served_comparisons: tuple[ServedComparison, ...] = ()
    verdict: Verdict | None = None
    served_steps: tuple[Any, ...] = ()  # harness.loop.iterations.StepRow: engine iterations from the streams vs the twin's
    stage_windows: tuple[dict[str, Any], ...] = ()  # StageWindow.to_dict() | WindowSummary.to_dict(), in order
    window_verdicts: dict[str, Any] = field(default_factory=dict)  # window mode -> Verdict.to_dict() (None: nothing judged)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": LOOP_REPORT_SCHEMA_VERSION, "status": self.status, "error": self.error,
            "model": self.model, "engine": self.engine, "constants": self.constants.to_dict() if self.constants else None,
            "predicted": [asdict(p) for p in self.predicted], "measured": [asdict(m) for m in self.measured],
            "comparisons": [c.to_dict() for c in self.comparisons], "checks": [c.to_dict() for c in self.checks],
            "settings": self.settings, "run_dir": self.run_dir, "notes": list(self.notes), "twin": self.twin,
            "capacity": self.capacity, "served": [p.to_dict() for p in self.served],
            "served_comparisons": [c.to_dict() for c in self.served_comparisons],
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "served_steps": [r.to_dict() for r in self.served_steps],
            "stage_windows": list(self.stage_windows), "window_verdicts": self.window_verdicts,
        }


__all__ = ["LOOP_REPORT_SCHEMA_VERSION", "LoopReport", "ServedMeasurement", "ServedPoint"]
