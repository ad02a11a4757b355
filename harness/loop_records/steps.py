"""Served steps: the engine's iterations reconstructed from a served run's streams against the twin's, per mix and
batch (harness.loop.iterations makes them; a diagnostic, nothing in it feeds a prediction)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from harness.served import record_from_dict


@dataclass(frozen=True)
class StepRow:
    """One batch size of one mix: the engine's reconstructed steps against the twin's, over the same workloads."""

    mix: str
    batch: int
    engine_n: int
    engine_median_s: float | None
    engine_mean_s: float | None
    twin_n: int
    twin_median_s: float | None
    twin_mean_s: float | None
    median_error: float | None  # (twin − engine) / engine, a signed fraction
    mean_error: float | None
    engine_share: float  # of the engine's reconstructed time, the share spent in iterations of this batch
    twin_share: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "served step") -> "StepRow":
        return record_from_dict(cls, d, source)


__all__ = ["StepRow"]
