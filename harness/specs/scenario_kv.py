"""Scenario kinds for the KV tiers, cache routing and lifecycle model (Chapter 9, §9.5–9.6, §9.7.1):
"kv-tiers", "cache-routing" and "lifecycle" (format in docs/model-kv.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.errors import HarnessError
from harness.specs._scenario_common import LinkName, NonNegInt, PosInt, VersionedScenario, check_known, check_model
from harness.specs.gpus import GPUS
from harness.specs.links import LINKS
from harness.specs.scenario import (
    EfficiencyPair,
    NonNegFloat,
    PosFloat,
    _Strict,
    load_toml,
    scenario_class,
    scenario_kind,
    validate_model,
)
from harness.specs.storage import SERVERS
from harness.units import DTYPE_BYTES

HitRate = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class ComputeSpec(_Strict):
    """Which model runs where, at which fraction of peak (the prefill/recompute times come from it)."""

    model: str = "qwen3-8b"
    gpu: str = "a100-80gb-sxm"
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    efficiency: EfficiencyPair = EfficiencyPair()

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        return check_model(v)
    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        return check_known(v, GPUS, "GPU")
    @field_validator("weight_dtype", "kv_dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        return check_known(v, DTYPE_BYTES, "dtype")


# ---- kind "kv-tiers" (§9.5.2, §9.5.3, §9.7.1) ----


class RetentionSection(_Strict):
    reuse_intervals_s: list[PosFloat] = Field(default_factory=lambda: [10.0, 600.0])


class BlocksSection(_Strict):
    count: PosInt
    tokens_per_block: PosInt


class ReuseSection(_Strict):
    link: LinkName = "nic-200g"
    slow_links: list[LinkName] = Field(default_factory=list)
    max_uses: Annotated[int, Field(ge=1, le=1000)] = 4
    remote_reads: PosInt = 100
    deadline_s: PosFloat = 1.0
    resident_s: NonNegFloat = 10.0




class PrefetchSection(_Strict):
    new_tokens: list[PosInt] = Field(default_factory=list)  # extra new-token counts to evaluate (exercise 9-8)
    max_hiding_tokens: Annotated[int, Field(ge=1, le=1_048_576)] = 65_536


class SsdBudgetSection(_Strict):
    prefix_hit_rates: list[HitRate] = Field(default_factory=lambda: [0.0])


class PagesSection(_Strict):
    tokens_per_page: PosInt = 16
    prompt_tokens: PosInt = 1024
    pages_read: PosInt = 64
    missing_page_index: NonNegInt | None = None
    waited_s: NonNegFloat = 1.0
    expected_remaining_wait_s: NonNegFloat | None = None

    @model_validator(mode="after")
    def _pages(self) -> "PagesSection":
        most = -(-self.prompt_tokens // self.tokens_per_page)
        if self.pages_read > most:
            raise ValueError(
                f"pages_read ({self.pages_read}) exceeds the {most} pages of {self.tokens_per_page} tokens "
                f"that a {self.prompt_tokens}-token prompt has; lower pages_read"
            )
        if self.missing_page_index is not None and self.missing_page_index >= self.pages_read:
            raise ValueError(f"missing_page_index ({self.missing_page_index}) must be below pages_read ({self.pages_read})")
        return self


class EvictionSection(_Strict):
    host_slots: PosInt
    ssd_slots: NonNegInt | None = None
    lookahead: NonNegInt | None = None  # default host_slots − 1
    trace: list[NonNegInt] = Field(default_factory=list)  # explicit session ids; else a generated multi-turn trace
    sessions: PosInt = 400
    turns_per_session: PosInt = 6
    active_sessions: PosInt = 64
    seed: NonNegInt = 0

    @model_validator(mode="after")
    def _size(self) -> "EvictionSection":
        if not self.trace and self.sessions * self.turns_per_session > 200_000:
            raise ValueError(
                f"sessions × turns_per_session = {self.sessions * self.turns_per_session} requests; "
                "keep the generated trace at most 200000 requests"
            )
        if len(self.trace) > 200_000:
            raise ValueError(f"trace has {len(self.trace)} requests; keep it at most 200000")
        return self


class HandoffSection(_Strict):
    direct_link: LinkName = "nic-200g"
    pool_write_link: LinkName = "nic-200g"
    pool_read_link: LinkName = "nic-200g"
    later_reuses: NonNegInt = 1



class KvTiersScenario(VersionedScenario):
    """KV tiers, keep/fetch/recompute, layer-wise prefetch, eviction, pages and P→D hand-off (kind "kv-tiers")."""

    kind: Literal["kv-tiers"] = "kv-tiers"
    compute: ComputeSpec = ComputeSpec()
    server: str = "dgx-a100"
    prefix_tokens: PosInt = 8192
    new_tokens: PosInt = 256
    compare_models: list[str] = Field(default_factory=list)
    retention: RetentionSection = RetentionSection()
    blocks: BlocksSection | None = None
    reuse: ReuseSection = ReuseSection()
    prefetch: PrefetchSection = PrefetchSection()
    ssd_budget: SsdBudgetSection = SsdBudgetSection()
    pages: PagesSection = PagesSection()
    eviction: EvictionSection | None = None
    handoff: HandoffSection | None = None

    @field_validator("server")
    @classmethod
    def _server(cls, v: str) -> str:
        if v not in SERVERS:
            raise ValueError(f"unknown server {v!r}; known: {', '.join(SERVERS)}")
        return v

    @field_validator("compare_models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        return [check_model(x) for x in v]


# ---- kind "cache-routing" (§9.5.4, example 9.7) ----


class FetchSection(_Strict):
    lookup_s: NonNegFloat = 0.0
    host_link: LinkName = "pcie4-x16"
    remote_links: list[LinkName] = Field(default_factory=list)




class SerialExampleSection(_Strict):
    queue_s: NonNegFloat
    fetch_s: NonNegFloat
    compute_s: NonNegFloat


class InvalidationSection(_Strict):
    holder_queue_s: NonNegFloat
    hit_probabilities: list[Probability] = Field(default_factory=lambda: [0.5, 0.9, 0.99])
    quantile: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.99
    target_s: PosFloat | None = None


class LinkLoadSection(_Strict):
    fetches_per_s: NonNegFloat
    link: LinkName = "nic-200g"



class StateRestoreSection(_Strict):
    prep_steps_s: Annotated[dict[str, NonNegFloat], Field(min_length=1)]
    free_instance_queue_s: NonNegFloat = 0.0
    holder_waits_s: list[NonNegFloat] = Field(default_factory=list)
    source: str = ""


class CacheRoutingScenario(VersionedScenario):
    """Example 9.7 and the rest of §9.5.4 (kind "cache-routing")."""

    kind: Literal["cache-routing"] = "cache-routing"
    compute: ComputeSpec = ComputeSpec()
    prefix_tokens: PosInt = 8192
    new_tokens: PosInt = 256
    holder_queue_s: NonNegFloat  # A: has the prefix in HBM
    free_queue_s: NonNegFloat  # B: no cache
    fetch: FetchSection = FetchSection()
    serial_example: SerialExampleSection | None = None
    invalidation: InvalidationSection | None = None
    link_load: LinkLoadSection | None = None
    state_restore: StateRestoreSection | None = None


# ---- kind "lifecycle" (§9.6) ----


class GraphCaptureSection(_Strict):
    extra_startup_s: NonNegFloat
    saving_per_step_s: PosFloat
    batch: PosInt = 1


class MigrationSection(_Strict):
    compute: ComputeSpec = ComputeSpec(gpu="h20-96gb")
    input_tokens: PosInt = 8192
    output_tokens: Annotated[int, Field(ge=2)] = 1025
    decode_batch: PosInt = 32
    links: Annotated[list[LinkName], Field(min_length=1)]



class ReconfigPath(_Strict):
    name: str
    link: LinkName
    payload_bytes: PosFloat | None = None  # default: the model's weight bytes



class ReconfigurationSection(_Strict):
    model: str = "qwen3-8b"
    weight_dtype: str = "bf16"
    serial_prep_s: NonNegFloat
    paths: Annotated[list[ReconfigPath], Field(min_length=1)]

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        return check_model(v)
    @field_validator("weight_dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        return check_known(v, DTYPE_BYTES, "dtype")


class RecoverySection(_Strict):
    compute: ComputeSpec = ComputeSpec()
    input_tokens: PosInt
    delivered_output_tokens: NonNegInt
    logged_output_tokens: NonNegInt
    kv_checkpoint_tokens: Annotated[list[NonNegInt], Field(min_length=1)]

    @model_validator(mode="after")
    def _ckpt(self) -> "RecoverySection":
        top = self.input_tokens + self.logged_output_tokens
        for c in self.kv_checkpoint_tokens:
            if c > top:
                raise ValueError(
                    f"kv_checkpoint_tokens entry {c} exceeds input_tokens + logged_output_tokens ({top}); "
                    "a checkpoint cannot cover tokens the log does not have"
                )
        return self


class LifecycleScenario(VersionedScenario):
    """Startup, migration, reconfiguration and recovery (kind "lifecycle", §9.6)."""

    kind: Literal["lifecycle"] = "lifecycle"
    graph_capture: GraphCaptureSection | None = None
    migration: MigrationSection | None = None
    reconfiguration: ReconfigurationSection | None = None
    recovery: RecoverySection | None = None

    @model_validator(mode="after")
    def _some(self) -> "LifecycleScenario":
        if not any((self.graph_capture, self.migration, self.reconfiguration, self.recovery)):
            raise ValueError("give at least one of [graph_capture], [migration], [reconfiguration], [recovery]")
        return self




def load_kind(path: str, kind: str):
    """Load a scenario file that must be of `kind`; another kind is refused with the subcommand to use."""
    data = load_toml(path)
    got = scenario_kind(data, path)
    if got != kind:
        raise HarnessError(
            f"scenario {path} is of kind {got!r}, not {kind!r}; "
            f"use the `harness model` subcommand for {got!r} (see `harness model list`)."
        )
    return validate_model(scenario_class(kind), data, str(path))
