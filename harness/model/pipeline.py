"""Ideal stage pipelines: makespan of q micro-batches through stages on independent resources.

Chapter 9, §9.3.4 (attention/expert two-stage pipeline, Fig. 9-17) and §9.4.3 (dispatch, compute,
combine with two micro-batches, Fig. 9-26): with per-micro-batch stage times t_k the makespan is
Σ_k t_k + (q-1)·max_k t_k; serial execution takes q·Σ_k t_k. No transfer or contention is counted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from harness.errors import HarnessError
from harness.specs._validate import positive_int


def _stages(stage_s: Sequence[float], field: str) -> list[float]:
    out = [float(t) for t in stage_s]
    if not out:
        raise HarnessError(f"{field}: give at least one stage time.")
    for i, t in enumerate(out):
        if not math.isfinite(t) or t < 0:
            raise HarnessError(f"{field}[{i}] must be a finite time in seconds >= 0, got {t!r}.")
    return out


def pipeline_makespan_s(stage_s_per_microbatch: Sequence[float], microbatches: int) -> float:
    """Σ_k t_k + (q-1)·max_k t_k: the first micro-batch crosses every stage, then one leaves per
    period of the slowest stage (§9.3.4: 2 + 3 + 3·3 = 14 ms for q=4)."""
    t = _stages(stage_s_per_microbatch, "stage_s_per_microbatch")
    positive_int("pipeline", "microbatches", microbatches)
    return sum(t) + (microbatches - 1) * max(t)


def serial_s(stage_s_per_microbatch: Sequence[float], microbatches: int) -> float:
    """q·Σ_k t_k: every micro-batch runs every stage before the next starts (§9.3.4: 4·5 = 20 ms)."""
    t = _stages(stage_s_per_microbatch, "stage_s_per_microbatch")
    positive_int("pipeline", "microbatches", microbatches)
    return microbatches * sum(t)


@dataclass(frozen=True, slots=True)
class PipelineGain:
    stage_s_per_microbatch: tuple[float, ...]
    microbatches: int
    serial_s: float
    pipelined_s: float
    saving_s: float  # the overhead budget: extra critical-path time that still keeps the pipeline ahead
    period_s: float  # steady-state time between finished micro-batches, max_k t_k

    def to_dict(self) -> dict:
        return asdict(self)


def pipeline_gain(stage_s_per_microbatch: Sequence[float], microbatches: int) -> PipelineGain:
    """Serial vs pipelined; the pipeline stays faster only while added communication and lost
    efficiency cost less than `saving_s` (§9.3.4: 6 ms for 2 ms/3 ms stages and 4 micro-batches)."""
    t = tuple(_stages(stage_s_per_microbatch, "stage_s_per_microbatch"))
    ser = serial_s(t, microbatches)
    pip = pipeline_makespan_s(t, microbatches)
    return PipelineGain(t, microbatches, ser, pip, ser - pip, max(t))


def split_batch_makespan_s(batch_stage_s: Sequence[float], microbatches: int) -> float:
    """A whole batch's stage times split evenly into q micro-batches, then pipelined (§9.4.3:
    0.336/0.156/0.336 ms in two halves -> 0.581 ms)."""
    t = _stages(batch_stage_s, "batch_stage_s")
    positive_int("pipeline", "microbatches", microbatches)
    return pipeline_makespan_s([x / microbatches for x in t], microbatches)
