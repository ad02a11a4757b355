"""The capacity plan as a frozen record tree (what `harness.model.plan.plan` returns).

Readers take fields by name and type (`p.pd.best.requests_per_s`); `as_json(p)` gives the JSON of
`harness model plan --json` and of a run's plan.json, every field documented in docs/model.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.model.calibration import ConstantProvenance
from harness.model.capacity import PdAllocation, PdGrid
from harness.model.deployment import ReusePair, SchemeRow, ScaleOut
from harness.model.queueing import DrainResult
from harness.model.record import as_json, flatten, hidden, omit_none
from harness.model.stages import StageRates


@dataclass(frozen=True, slots=True)
class WorkloadFigures:
    """The request the plan is for (scenario [workload]) and what follows from it (§9.2.3)."""

    input_tokens: int
    output_tokens: int
    cached_prefix_tokens: int
    new_tokens: int  # input − cached prefix: what prefill computes
    decode_calls: int  # output − 1: the first token comes from prefill
    decode_batch: int
    mean_context_tokens: float  # mean KV length over the decode calls
    arrival_rate_per_s: float


@dataclass(frozen=True, slots=True)
class KvHandoff:
    """The KV state handed from P to D and its transfer T = α + V/B (§9.2.2)."""

    bytes_per_token: float
    bytes_per_request: float  # V at the end of prefill
    transfer_s: float | None  # None without a [link]
    link: str | None
    link_bandwidth_bytes_per_s: float | None
    link_startup_latency_s: float | None
    double_buffer_bytes: float
    final_bytes_per_request: float  # KV after the last decode call


@dataclass(frozen=True, slots=True)
class GpuMemoryFit:
    """Whether one GPU type holds its stage, and the decode batch the plan runs on it (issue 18)."""

    hbm_capacity_bytes: int
    decode_fits: bool  # at the scenario's decode batch
    prefill_fits: bool
    max_decode_batch: int  # ⌊(HBM − weights − one receive buffer) / final KV⌋; 0: not even one request fits
    planned_decode_batch: int  # min(scenario batch, max_decode_batch): the batch its stage rates use (0: no decode)
    note: str | None = omit_none()  # what does not fit and what the plan did about it
    tensor_parallel: int | None = omit_none()  # cards per instance when > 1: the batch and fits are one instance's
    expert_parallel: int | None = omit_none()  # EP groups the instance's experts are spread over, when > 1


@dataclass(frozen=True, slots=True)
class MemoryCheck:
    """HBM check of §9.7.2: D holds weights + batch × final KV + one receive buffer; P holds weights + two states."""

    weight_bytes: float
    decode_side_bytes: float
    prefill_side_bytes: float
    per_gpu: Mapping[str, GpuMemoryFit]

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(f"{g}: {f.note}" for g, f in self.per_gpu.items() if f.note)


@dataclass(frozen=True, slots=True)
class Capacity:
    requests_per_s: float


@dataclass(frozen=True, slots=True)
class PdPlan:
    """Best PD allocation, every allocation tied with it, the scenario's reference allocations (§9.2.3)."""

    best: PdAllocation
    optimal: tuple[PdAllocation, ...]
    grid: tuple[PdAllocation, ...] | None  # every allocation, only when asked for (`--no-grid` leaves it out)
    references: Mapping[str, PdAllocation]
    search: PdGrid = hidden()  # the allocation space itself, for readers that evaluate cells (heatmaps)
    grid_omitted: str | None = omit_none()  # why `grid` is null although it was asked for (too many allocations)


@dataclass(frozen=True, slots=True)
class StartupFigures:
    """Backlog after a startup and the service rate a deadline needs (§9.6.1, §9.7.2)."""

    startup_s: float
    deadline_s: float | None
    backlog_requests: float
    min_requests_per_s_for_deadline: float | None  # None without a deadline


@dataclass(frozen=True, slots=True)
class ReferenceAtScale:
    allocation: PdAllocation = flatten()
    clear_at_s: float | None = None


@dataclass(frozen=True, slots=True)
class SensitivityPd:
    pd_best: PdAllocation
    pd_best_clear_at_s: float | None
    references: Mapping[str, ReferenceAtScale]


@dataclass(frozen=True, slots=True)
class SensitivityRow:
    """Capacity with every efficiency scaled by one factor (§9.7.2: at 90%)."""

    colocated_requests_per_s: float
    chunked_colocated_requests_per_s: float
    pd: SensitivityPd | None = flatten(optional=True)  # absent when the scenario has no PD split


@dataclass(frozen=True, slots=True)
class Sensitivity:
    efficiency_scale: Mapping[str, SensitivityRow]  # keyed by the factor as printed ("0.9")


@dataclass(frozen=True, slots=True)
class CostAtCapacity:
    replicas: float | None
    pd: float | None


@dataclass(frozen=True, slots=True)
class SloCost:
    slo_fraction: float
    good_requests_per_s: float
    effective_per_1000_good: float | None


@dataclass(frozen=True, slots=True)
class CostPlan:
    """Cost per 1000 requests from an hourly price (§9.7.2)."""

    currency: str
    price_per_hour: float
    per_1000_at_arrival_rate: float | None
    per_1000_at_capacity: CostAtCapacity
    slo: SloCost | None = flatten(optional=True)


@dataclass(frozen=True, slots=True)
class DeploymentPlan:
    """Replicas vs direct PD vs PD through a shared pool, reuse, scale-out and cost (§9.7.1–9.7.3)."""

    schemes: tuple[SchemeRow, ...]
    reuse_pair: Mapping[str, ReusePair]  # empty without a [link]
    scale_out: ScaleOut  # copies of the group at its best scheme (PD when it has a split, else replicas)
    shared_pool_states: Mapping[str, int] | None = omit_none()
    cost: CostPlan | None = omit_none()
    note: str | None = omit_none()  # why the PD rows are missing (no split, no link)


@dataclass(frozen=True, slots=True)
class CapacityAt:
    """Capacity with every measured constant at one end of its interval (or at its value)."""

    colocated_requests_per_s: float
    chunked_colocated_requests_per_s: float
    pd_best_requests_per_s: float | None
    pd_best_clear_at_s: float | None


@dataclass(frozen=True, slots=True)
class Interval:
    value: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True, slots=True)
class CapacityInterval:
    colocated_requests_per_s: Interval
    chunked_colocated_requests_per_s: Interval
    pd_best_requests_per_s: Interval
    pd_best_clear_at_s: Interval  # falls as capacity rises: its low end comes from the optimistic constants


@dataclass(frozen=True, slots=True)
class CalibrationSection:
    """Where every constant came from, and capacity over the constants' 95% intervals."""

    file: str
    machine: str
    constants: tuple[ConstantProvenance, ...]
    capacity_interval: CapacityInterval


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything `harness model plan` computes for one scenario (Chapter 9, §9.1–9.2, §9.6.1, §9.7)."""

    scenario: str
    source: str
    model: str
    workload: WorkloadFigures
    stage_rates: Mapping[str, StageRates]  # per GPU type, in pool order
    kv: KvHandoff
    memory: MemoryCheck
    colocated: Capacity
    chunked_colocated: Capacity
    pd: PdPlan | None  # None with fewer than two GPUs, no decode calls, or no GPU type that holds a stage
    drain: Mapping[str, DrainResult]  # "replicas", "chunked_colocated", "pd", "pd:<reference>"
    startup: StartupFigures
    sensitivity: Sensitivity
    deployment: DeploymentPlan
    calibration: CalibrationSection | None = omit_none()
    warnings: tuple[str, ...] | None = omit_none()  # loud caveats on the figures (a stage that does not fit in HBM)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of `harness model plan --json` (and of a run's plan.json)."""
        return as_json(self)


def _pick(cls: type, d: Mapping[str, Any], where: str) -> Any:
    """A flat record from its JSON object, by field name (keys the record does not have are ignored)."""
    from harness.errors import HarnessError

    names = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("hidden")]
    if not isinstance(d, Mapping) or any(n not in d for n in names):
        missing = [n for n in names if not isinstance(d, Mapping) or n not in d]
        raise HarnessError(f"plan.json: {where} lacks {', '.join(missing)}; regenerate the run's plan with this harness.")
    return cls(**{n: d[n] for n in names})


@dataclass(frozen=True, slots=True)
class StoredPlan:
    """The figures a report reads back from a run's plan.json (written as as_json of a Plan): the key
    names live here, beside the records that wrote them, not in the report."""

    workload: WorkloadFigures
    kv: KvHandoff
    colocated: Capacity
    chunked_colocated: Capacity
    pd_best: PdAllocation | None
    prefill_s_per_request: Mapping[str, float]  # per GPU type
    decode_step_s: Mapping[str, float]
    drain: Mapping[str, DrainResult]
    startup: StartupFigures

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "StoredPlan":
        from harness.errors import HarnessError

        if not isinstance(d, Mapping) or "stage_rates" not in d:
            raise HarnessError("plan.json is not a plan written by `harness model plan` (no stage_rates); regenerate it.")
        best = None
        if d.get("pd"):
            b = d["pd"]["best"]
            link = b.get("link_requests_per_s")
            best = _pick(PdAllocation, {**b, "link_requests_per_s": math.inf if link is None else link}, "pd.best")
        return cls(
            workload=_pick(WorkloadFigures, d["workload"], "workload"),
            kv=_pick(KvHandoff, d["kv"], "kv"),
            colocated=_pick(Capacity, d["colocated"], "colocated"),
            chunked_colocated=_pick(Capacity, d["chunked_colocated"], "chunked_colocated"),
            pd_best=best,
            prefill_s_per_request={g: v["prefill_s_per_request"] for g, v in d["stage_rates"].items()},
            decode_step_s={g: v["decode_step_s"] for g, v in d["stage_rates"].items()},
            drain={name: DrainResult(name, **{f.name: v[f.name] for f in dataclasses.fields(DrainResult) if f.name != "scheme"})
                   for name, v in (d.get("drain") or {}).items()},
            startup=_pick(StartupFigures, d["startup"], "startup"),
        )
