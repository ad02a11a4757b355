"""The §9.5–9.6 calculator results as frozen record trees (what `harness.model.kv_plan` returns).

Readers take fields by name (`plan.migration.links[0].catch_up_s`); `as_json(plan)` is the JSON of
`harness model kv-tiers | route | lifecycle --json`, every field documented in docs/model-kv.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.model.lifecycle import GraphCaptureBreakEven, MigrationCatchUp, Reconfiguration, RecoveryPlan
from harness.model.record import as_json, flatten, omit_none
from harness.model.stages import Efficiency


@dataclass(frozen=True, slots=True)
class PlanHead:
    """The scenario a calculator ran on."""

    scenario: str
    kind: str
    source: str
    description: str


@dataclass(frozen=True, slots=True)
class ComputeFigures:
    """A model on a GPU at an efficiency (the scenario's [compute] section)."""

    model: str
    gpu: str
    efficiency: Efficiency
    weight_bytes: float
    kv_bytes_per_token: float


@dataclass(frozen=True, slots=True)
class MigrationOverLink:
    catch_up: MigrationCatchUp = flatten()
    link: str = ""


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """§9.6.2: the decode state a worker holds, how fast it grows, and the catch-up over each link."""

    compute: ComputeFigures
    decode_batch: int
    mean_context_tokens: float
    decode_calls_per_s: float
    state_bytes: float  # batch × mean context × KV/token
    growth_bytes_per_s: float
    links: tuple[MigrationOverLink, ...]


@dataclass(frozen=True, slots=True)
class ReconfigurationPath:
    time: Reconfiguration = flatten()
    link: str = ""
    reduction_vs_first: float = 0.0  # 1 − total / total of the first path


@dataclass(frozen=True, slots=True)
class ReconfigurationPlan:
    model: str
    weight_bytes: float
    serial_prep_s: float
    paths: tuple[ReconfigurationPath, ...]


@dataclass(frozen=True, slots=True)
class RecoveryCase:
    plan: RecoveryPlan = flatten()
    replay_s: float = 0.0  # prefill of the replayed tokens on top of the checkpoint


@dataclass(frozen=True, slots=True)
class RecoveryPlans:
    compute: ComputeFigures
    plans: tuple[RecoveryCase, ...]  # one per kv_checkpoint_tokens


@dataclass(frozen=True, slots=True)
class LifecyclePlan:
    """Graph-capture break-even, migration catch-up, reconfiguration and recovery (§9.6); absent sections omitted."""

    head: PlanHead = flatten()
    graph_capture: GraphCaptureBreakEven | None = omit_none()
    migration: MigrationPlan | None = omit_none()
    reconfiguration: ReconfigurationPlan | None = omit_none()
    recovery: RecoveryPlans | None = omit_none()

    def to_dict(self) -> dict[str, Any]:
        return as_json(self)
