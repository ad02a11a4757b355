"""The §9.3–9.4 calculator results as frozen record trees (what `harness.model.expert_plans` returns).

Readers take fields by name (`plan.exchange.cases[0].dispatch.bound_s`); `as_json(plan)` is the JSON
of `harness model experts | af | ep-skew | replicas --json`, every field in docs/model-experts.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.model.af_split import AfTransfer, RequestTransfer
from harness.model.ep_skew import EpLayerBound, HotCardLoad, RandomSkew
from harness.model.expert_capacity import BatchReuse, ResidentExperts
from harness.model.expert_replicas import PoolStability, ReplicaPlan
from harness.model.experts_cpu_gpu import BatchExpertTimes, Crossover, ExpertHardware, ExpertShape
from harness.model.mla_compact_path import DPoolEffect
from harness.model.moe_overlap import OverlapGain, PaddedRows, TokenCompletion
from harness.model.pipeline import PipelineGain
from harness.model.record import as_json, flatten


@dataclass(frozen=True, slots=True)
class ExpertPlanHead:
    scenario: str
    kind: str
    source: str


class _Json:
    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return as_json(self)


# ---- experts-cpu-gpu (example 9.3, §9.3.2 – 9.3.3) ----


@dataclass(frozen=True, slots=True)
class LinkFigures:
    label: str
    bandwidth_bytes_per_s: float
    startup_latency_s: float


@dataclass(frozen=True, slots=True)
class ExpertPath:
    """One CPU kernel over one NUMA path: the batch cases, the CPU/GPU crossover and the CPU balance point."""

    cpu_kernel: str
    numa: str
    hardware: ExpertHardware
    cases: tuple[BatchExpertTimes, ...]
    crossover: Crossover | None
    cpu_balance_tokens: float


@dataclass(frozen=True, slots=True)
class ExpertCapacityFigures:
    gpu: str
    resident: tuple[ResidentExperts, ...]
    reuse: BatchReuse


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpertsPlan(_Json):
    head: ExpertPlanHead = flatten()
    model: str
    expert: ExpertShape
    cpu: str
    gpu: str
    link: LinkFigures
    paths: tuple[ExpertPath, ...]
    balance_tokens: Mapping[str, Mapping[str, float]]  # weight dtype -> "kernel/numa" -> m
    capacity: ExpertCapacityFigures


# ---- af-split (example 9.4, §9.3.4) ----


@dataclass(frozen=True, slots=True)
class AfAtBandwidth:
    bandwidth_bytes_per_s: float
    decode_step: AfTransfer
    prefill_step: AfTransfer
    requests: tuple[RequestTransfer, ...]


@dataclass(frozen=True, slots=True)
class SplitSweepRow:
    """Exercise 9-4: the same payload in one launch or in 2·layers launches."""

    state: str
    state_bytes: float
    startup_latency_s: float
    bandwidth_bytes_per_s: float
    one_transfer_s: float
    split_transfers: int
    split_s: float


@dataclass(frozen=True, slots=True)
class MlaCompactFigures:
    state_model: str
    state_bytes: float
    link: str | None
    link_requests_per_s: float  # inf (null in JSON) without a link
    effect: DPoolEffect = flatten()


@dataclass(frozen=True, slots=True, kw_only=True)
class AfPlan(_Json):
    head: ExpertPlanHead = flatten()
    model: str
    states: Mapping[str, float]
    per_bandwidth: tuple[AfAtBandwidth, ...]
    same_payload_split: tuple[SplitSweepRow, ...]
    pipeline: PipelineGain
    mla_compact_path: MlaCompactFigures | None


# ---- ep-skew (§9.4.1, example 9.5, §9.4.3) ----


@dataclass(frozen=True, slots=True)
class RoutingFigures:
    tokens: int
    top_k: int
    n_experts: int
    assignments: int
    mean_rows_per_expert: float


@dataclass(frozen=True, slots=True)
class HotCardFigures:
    load: HotCardLoad = flatten()
    hot_card_receive_bytes: float = 0.0
    hot_card_receive_s: float = 0.0
    mean_card_receive_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ExchangeFigures:
    model: str
    gpu: str
    group_flops_per_s: float
    flops_per_assignment: float
    cases: tuple[EpLayerBound, ...]


@dataclass(frozen=True, slots=True)
class OverlapFigures:
    case: str
    padding: PaddedRows
    pipeline: OverlapGain
    token_completion: TokenCompletion


@dataclass(frozen=True, slots=True, kw_only=True)
class EpSkewPlan(_Json):
    head: ExpertPlanHead = flatten()
    routing: RoutingFigures
    hot_expert: tuple[HotCardFigures, ...]
    random_routing: tuple[RandomSkew, ...]
    exchange: ExchangeFigures | None
    overlap: OverlapFigures | None


# ---- expert-replicas (example 9.6) ----


@dataclass(frozen=True, slots=True)
class ReplicaCopy:
    name: str
    link: str | None
    bandwidth_bytes_per_s: float
    startup_latency_s: float
    copy_s: float
    payback_batches: int | None
    net_gain_s: Mapping[str, float]  # horizon in batches -> net gain


@dataclass(frozen=True, slots=True)
class FreeMemoryCheck:
    free_bytes_per_receiver: float
    feasible: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicasPlan(_Json):
    head: ExpertPlanHead = flatten()
    model: str
    gpu: str
    card_flops_per_s: float
    card_hbm_bytes_per_s: float
    expert_bytes: float
    activation_bytes_per_row: float
    plan: ReplicaPlan
    copies: tuple[ReplicaCopy, ...]
    free_memory_checks: tuple[FreeMemoryCheck, ...]
    memory_budget: Mapping[str, float]  # layers -> replica bytes per card
    pool: PoolStability | None
