"""The state one loop carries between its steps: typed, one field per thing the steps hand on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from harness.loop.budget import BudgetPlan, WindowPlan
from harness.loop.options import LoopPlan
from harness.loop_records.report import LoadRun, LoopPoint, MixCapacity
from harness.loop_records.stages import CpuConstants, StageMeasurement, StagePrediction
from harness.loop_records.verdict import AbsoluteVerdict
from harness.loop_records.windows import StageWindow
from harness.served import ServedMeasurement, ServedPoint, ServedPrediction
from harness.target.stage_requests import RequestCheck
from harness.target.twin import TwinSpec
from workloads.artifact import WorkloadArtifact


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class EngineTarget:
    """The engine a loop measures: its endpoint and served model name, the model's vocabulary (the stage requests are
    token ids; None for a remote target), the engine's process and threads (its CPU share; None and 1 when it is not a
    local process) and `alive()`, which raises when the engine has died."""

    url: str
    served_name: str
    vocab: int | None = None
    pid: int | None = None
    threads: int = 1
    alive: Callable[[], None] = _nothing


@dataclass(frozen=True)
class PlannedPoint:
    """A served point as planned: its identity, the fraction of the predicted capacity it was set at (inf: a capacity
    burst), the workload it sends (fitted to the engine's tokenizer once sent) and the twin's prediction of it."""

    point: ServedPoint
    fraction: float
    artifact: WorkloadArtifact
    prediction: ServedPrediction
    simulate_s: float
    windows: tuple[int, ...] = (0,)  # the stage windows whose corrections made the twin that predicted it

    @property
    def burst(self) -> bool:
        return self.point.burst


@dataclass(frozen=True)
class RunResult:
    """One load run of a point: its figures (the shared record), the engine's side, and the measured requests' TTFT and
    TPOT in the summary's window (what the median's bootstrap interval resamples; not stored)."""

    served: ServedMeasurement
    run: LoadRun
    samples: dict[str, tuple[float, ...]] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class MeasuredPoint:
    """A point's load runs (one per repeat, back to back) and their median with its intervals."""

    runs: tuple[RunResult, ...]
    measurement: ServedMeasurement


@dataclass
class LoopState:
    """Everything one loop has planned, measured and fitted so far; a failure midway reports what is here."""

    plan: LoopPlan
    notes: list[str] = field(default_factory=list)
    constants: CpuConstants | None = None
    stage_predictions: list[StagePrediction] = field(default_factory=list)
    stage_measurements: list[StageMeasurement] = field(default_factory=list)
    checks: list[RequestCheck] = field(default_factory=list)
    base_twin: TwinSpec | None = None  # the twin before any stage correction
    twin: TwinSpec | None = None  # the twin the compared predictions were made with
    capacity: dict[str, MixCapacity] = field(default_factory=dict)
    points: list[PlannedPoint] = field(default_factory=list)  # the rate points, then the capacity bursts
    measured: dict[int, MeasuredPoint] = field(default_factory=dict)  # by point index
    point_twins: dict[int, TwinSpec] = field(default_factory=dict)  # the twin that predicted each point (stage windows)
    windows: list[StageWindow] = field(default_factory=list)
    first_window_verdict: AbsoluteVerdict | None = None
    time_to_ready: dict[str, Any] | None = None  # the engine's TimeToReady document (harness.engines.launcher)
    budget: BudgetPlan | None = None  # the time budget's plan after the first stage window
    window_plan: WindowPlan | None = None  # the time budget's estimate before the first stage window

    def note(self, text: str, say: Any = None) -> None:
        """A note in the report, also said as the loop runs."""
        self.notes.append(text)
        if say is not None:
            say(text)

    def loop_points(self) -> list[LoopPoint]:
        """The points as stored: each with its measurement and load runs once measured."""
        out = []
        for p in self.points:
            m = self.measured.get(p.point.index)
            out.append(LoopPoint(p.point, p.fraction, p.artifact.count, p.prediction, p.simulate_s, p.windows,
                                 None if m is None else m.measurement, () if m is None else tuple(r.run for r in m.runs)))
        return out

    def twin_of(self, index: int) -> TwinSpec | None:
        """The twin that predicted point `index`."""
        return self.point_twins.get(index) or self.twin


__all__ = ["EngineTarget", "LoopState", "MeasuredPoint", "PlannedPoint", "RunResult"]
