"""The §9.5–9.6 calculator results as frozen record trees (what `harness.model.kv_plan` returns).

Readers take fields by name (`plan.migration.links[0].catch_up_s`); `as_json(plan)` is the JSON of
`harness model kv-tiers | route | lifecycle --json`, every field documented in docs/model-kv.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collections.abc import Mapping

from harness.model.cache_routing import AffinityChoice, FetchLinkLoad, RoutePath, TwoPointTtft
from harness.model.handoff import HandoffComparison
from harness.model.kv_eviction import EvictionResult
from harness.model.kv_pages import MissingPageDecision, PageLayout, PageReuse
from harness.model.kv_prefetch import PrefetchTimeline
from harness.model.kv_reuse import CriticalBandwidth, KeepDecision, UsageMode
from harness.model.kv_tiers import IntervalCapacity, SsdWriteBudget, TierFetch
from harness.model.lifecycle import GraphCaptureBreakEven, MigrationCatchUp, Reconfiguration, RecoveryPlan
from harness.model.record import as_json, flatten, omit_none
from harness.model.stages import Efficiency
from harness.specs.storage import Hop


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


# ---- kv-tiers (§9.5.2 – 9.5.3, §9.7.1) ----


@dataclass(frozen=True, slots=True)
class TierFigures:
    """One storage tier per GPU: the fetch against recompute, retention, and the tier's path."""

    fetch: TierFetch = flatten()
    fetch_hops: tuple[Hop, ...] = ()
    write_bandwidth_bytes_per_s: float | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class BlocksFigures:
    count: int
    tokens_per_block: int
    bytes: float


@dataclass(frozen=True, slots=True)
class SlowLink:
    link: str
    bandwidth_bytes_per_s: float
    fetch_s: float
    decision: KeepDecision


@dataclass(frozen=True, slots=True)
class SsdKeep:
    write_s: float
    read_s: float
    decision: KeepDecision


@dataclass(frozen=True, slots=True)
class StateFigures:
    """One model's state of the prefix over the reuse link (GQA vs the compact MLA state)."""

    model: str
    attention: str
    state_bytes: float
    fetch_s: float
    write_plus_read_s: float
    remote_reads_link_busy_s: float
    remote_reads_bandwidth_bytes_per_s: float
    remote_reads_oversubscription: float
    resident_byte_seconds: float


@dataclass(frozen=True, slots=True)
class ReuseFigures:
    """Keep / fetch / recompute (§9.5.2)."""

    link: str
    link_bandwidth_bytes_per_s: float
    decision: KeepDecision
    critical_bandwidth_bytes_per_s: float
    critical_bandwidth_by_uses: tuple[CriticalBandwidth, ...]
    slow_links: tuple[SlowLink, ...]
    ssd: SsdKeep
    usage_modes: tuple[UsageMode, ...]
    states: tuple[StateFigures, ...]


@dataclass(frozen=True, slots=True)
class PrefetchTier:
    tier: str
    read_s: float
    read_per_layer_s: float
    per_layer_total_s: float
    hiding_new_tokens: int | None
    queue_wait_to_stage_in_host_s: float


@dataclass(frozen=True, slots=True)
class PrefetchAtNewTokens:
    new_tokens: int
    compute_s: float
    per_layer_total_s: float
    buffer_bytes: float
    layers_to_preload: int  # closed formula
    layers_to_preload_used: int  # the count that hides the read (simulated when the formula falls short)


@dataclass(frozen=True, slots=True)
class PrefetchFigures:
    """Layer-wise prefetch (§9.5.2, Fig. 9-32 – 9-34)."""

    layer_bytes: float
    compute_s: float
    compute_per_layer_s: float
    host_read_s: float
    read_then_compute: PrefetchTimeline
    per_layer: PrefetchTimeline
    buffer_bytes: float
    layers_to_preload: int  # ⌈S_buf / layer⌉
    layers_to_preload_simulated: int
    layers_to_preload_used: int
    pre_loaded: PrefetchTimeline
    tiers: tuple[PrefetchTier, ...]
    new_tokens: tuple[PrefetchAtNewTokens, ...]
    host_prefixes_to_stage: int


@dataclass(frozen=True, slots=True)
class PagesFigures:
    layout: PageLayout
    reuse: PageReuse
    missing_page: MissingPageDecision


@dataclass(frozen=True, slots=True)
class EvictionFigures:
    trace: str  # "explicit" or "generated"
    requests: int
    sessions: int
    policies: Mapping[str, EvictionResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class KvTiersPlan:
    """Tiers, retention, keep/fetch/recompute, prefetch, SSD budget, pages, eviction and hand-off of one prefix."""

    head: PlanHead = flatten()
    compute: ComputeFigures
    server: str
    prefix_tokens: int
    new_tokens: int
    state_bytes: float
    recompute_s: float
    kv_production_bytes_per_s: float
    tiers: tuple[TierFigures, ...]
    reuse_intervals: tuple[IntervalCapacity, ...]
    blocks: BlocksFigures | None = omit_none()
    reuse: ReuseFigures
    prefetch: PrefetchFigures
    ssd_budget: tuple[SsdWriteBudget, ...]
    pages: PagesFigures
    eviction: EvictionFigures | None = omit_none()
    handoff: HandoffComparison | None = omit_none()

    def to_dict(self) -> dict[str, Any]:
        return as_json(self)


# ---- cache-aware routing (§9.5.4, example 9.7) ----


@dataclass(frozen=True, slots=True)
class TieBandwidths:
    """Fetch-link bandwidth at which the fetch path ties another path; None when no bandwidth does."""

    vs_local_hit: float | None
    vs_recompute: float | None


@dataclass(frozen=True, slots=True)
class SerialExample:
    overlap_t_first_s: float  # max(Q, R) + C
    serial_t_first_s: float  # Q + R + C


@dataclass(frozen=True, slots=True)
class InvalidationFigures:
    """An uncertain cache hit: the hit probability at which waiting for the holder pays (§9.5.4)."""

    hit_s: float
    miss_s: float
    alternative_s: float
    min_hit_probability_for_mean: float | None
    target_s: float | None
    min_hit_probability_for_quantile: float | None
    by_probability: tuple[TwoPointTtft, ...]


@dataclass(frozen=True, slots=True)
class LinkLoadFigures:
    load: FetchLinkLoad = flatten()
    link: str = ""


@dataclass(frozen=True, slots=True)
class StateRestoreFigures:
    prep_steps_s: Mapping[str, float]
    threshold_s: float
    choices: tuple[AffinityChoice, ...]
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingPlan:
    """Example 9.7: the paths, tie bandwidths, uncertain hits, fetch link load and the affinity threshold."""

    head: PlanHead = flatten()
    compute: ComputeFigures
    prefix_tokens: int
    new_tokens: int
    state_bytes: float
    hit_compute_s: float
    full_compute_s: float
    fetch_fixed_s: float
    paths: tuple[RoutePath, ...]
    best_path: str
    tie_bandwidth_bytes_per_s: TieBandwidths
    serial_example: SerialExample | None = omit_none()
    invalidation: InvalidationFigures | None = omit_none()
    link_load: LinkLoadFigures | None = omit_none()
    state_restore: StateRestoreFigures | None = omit_none()

    def to_dict(self) -> dict[str, Any]:
        return as_json(self)
