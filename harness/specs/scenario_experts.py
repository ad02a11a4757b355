"""Scenario kinds for the expert and attention/FFN model (Chapter 9, §9.3–9.4): "experts-cpu-gpu",
"af-split", "ep-skew" and "expert-replicas" (fields in docs/model-experts.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator, model_validator

from harness.errors import HarnessError

from harness.specs._scenario_common import LinkName, NonNegInt, PosInt, VersionedScenario, check_known, check_model
from harness.specs.cpus import CPUS, CPU_KERNELS, NUMA_PATHS
from harness.specs.gpus import GPUS
from harness.specs.links import LINKS
from harness.specs.models import MODELS
from harness.specs.limits import MAX_SIMULATED_DRAWS, grid_problem
from harness.specs.scenario import (
    EfficiencyPair,
    LinkSection,
    NonNegFloat,
    PosFloat,
    _Strict,
    load_toml,
    scenario_kind,
    validate_model,
)
from harness.units import DTYPE_BYTES

M = TypeVar("M", bound=BaseModel)


class ExpertSection(_Strict):
    """Which model's routed expert, at which weight and activation width."""

    model: str = "qwen3-235b-a22b"
    weight_dtype: str = "bf16"
    activation_dtype: str = "bf16"

    _m = field_validator("model")(classmethod(lambda cls, v: check_model(v)))
    _d = field_validator("weight_dtype", "activation_dtype")(classmethod(lambda cls, v: check_known(v, DTYPE_BYTES, "dtype")))


# ---------------------------------------------------------------- experts-cpu-gpu (§9.3.2–9.3.3)


class CpuSection(_Strict):
    spec: str = "xeon-platinum-8452y"
    kernels: Annotated[list[Literal["avx512", "amx"]], Field(min_length=1)] = ["avx512", "amx"]
    numa: Annotated[list[Literal["local", "remote"]], Field(min_length=1)] = ["local", "remote"]

    _s = field_validator("spec")(classmethod(lambda cls, v: check_known(v, CPUS, "CPU")))


class GpuSection(_Strict):
    spec: str = "a100-40gb-pcie"
    efficiency: EfficiencyPair = EfficiencyPair()

    _s = field_validator("spec")(classmethod(lambda cls, v: check_known(v, GPUS, "GPU")))


class BatchSection(_Strict):
    experts: PosInt = 8  # experts the batch touches, run one after another
    tokens_per_expert: Annotated[list[NonNegInt], Field(min_length=1)] = [1, 128]  # one case per value


class CapacitySection(_Strict):
    """§9.3.3: resident experts against free HBM, and weight reads of one batch under three routings."""

    gpu: str = "a100-80gb-sxm"  # whose HBM is handed to experts
    reserved_bytes: NonNegFloat = 0.0  # HBM kept for KV, activations and the rest of the model
    resident_per_layer: Annotated[list[NonNegInt], Field(min_length=1)] = [32, 16]
    batch_tokens: NonNegInt = 64
    balance_weight_dtypes: list[str] = ["bf16", "int8"]  # exercise 9-3: the balance point per weight width

    _g = field_validator("gpu")(classmethod(lambda cls, v: check_known(v, GPUS, "GPU")))

    @field_validator("balance_weight_dtypes")
    @classmethod
    def _dtypes(cls, v: list[str]) -> list[str]:
        return [check_known(x, DTYPE_BYTES, "dtype") for x in v]


class ExpertsCpuGpuScenario(VersionedScenario):
    """Example 9.3 and §9.3.3: CPU vs GPU expert execution, crossovers, balance points, capacity, reuse."""

    kind: Literal["experts-cpu-gpu"] = "experts-cpu-gpu"
    expert: ExpertSection = ExpertSection()
    cpu: CpuSection = CpuSection()
    gpu: GpuSection = GpuSection()
    link: LinkSection = LinkSection(spec="pcie4-x16")
    batch: BatchSection = BatchSection()
    capacity: CapacitySection = CapacitySection()

    @model_validator(mode="after")
    def _experts(self) -> "ExpertsCpuGpuScenario":
        m = MODELS.get(self.expert.model)
        if m is not None and not m.is_moe:
            raise ValueError(f"expert.model {m.name!r} has no routed experts; pick a MoE model such as qwen3-235b-a22b")
        if m is not None:
            if self.batch.experts > m.n_routed_experts:
                raise ValueError(f"batch.experts ({self.batch.experts}) exceeds the model's {m.n_routed_experts} routed experts")
            for r in self.capacity.resident_per_layer:
                if r > m.n_routed_experts:
                    raise ValueError(
                        f"capacity.resident_per_layer value {r} exceeds the model's {m.n_routed_experts} routed experts per layer"
                    )
        return self


# ---------------------------------------------------------------- af-split (§9.3.4, example 9.4)


class AfSection(_Strict):
    model: str = "qwen3-8b"
    activation_dtype: str = "bf16"
    bandwidths_bytes_per_s: Annotated[list[PosFloat], Field(min_length=1)] = [25e9, 50e9]
    startup_latency_s: NonNegFloat = 5e-6
    prefill_tokens: PosInt = 8192
    startup_sweep_s: list[NonNegFloat] = [1e-6, 5e-6, 20e-6]  # exercise 9-4: one transfer vs N of the same total

    _m = field_validator("model")(classmethod(lambda cls, v: check_model(v)))
    _d = field_validator("activation_dtype")(classmethod(lambda cls, v: check_known(v, DTYPE_BYTES, "dtype")))


class StatesSection(_Strict):
    """PD states to set against AF: the KV of `input_tokens` for each model (GQA, compact MLA...)."""

    models: Annotated[list[str], Field(min_length=1)] = ["qwen3-8b", "deepseek-v3"]
    input_tokens: PosInt = 8192
    kv_dtype: str = "bf16"
    decode_steps: Annotated[list[PosInt], Field(min_length=1)] = [1024, 4096]

    @field_validator("models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        return [check_model(x) for x in v]

    _d = field_validator("kv_dtype")(classmethod(lambda cls, v: check_known(v, DTYPE_BYTES, "dtype")))


class PipelineSection(_Strict):
    attention_s: NonNegFloat = 2e-3
    ffn_s: NonNegFloat = 3e-3
    microbatches: PosInt = 4


class PoolEntry(_Strict):
    gpu: str
    count: PosInt  # bounded with the other pools by grid_problem

    _g = field_validator("gpu")(classmethod(lambda cls, v: check_known(v, GPUS, "GPU")))


class MlaCompactSection(_Strict):
    """§9.2.3: keep example 9.2's stage rates, ship the compact MLA state, charge its extra FLOPs to D."""

    stage_model: str = "qwen3-8b"
    state_model: str = "deepseek-v3"
    input_tokens: PosInt = 8192
    output_tokens: Annotated[int, Field(ge=2)] = 1025
    decode_batch: PosInt = 32
    arrival_rate_per_s: NonNegFloat = 3.5
    pools: Annotated[list[PoolEntry], Field(min_length=1)] = [
        PoolEntry(gpu="a100-80gb-sxm", count=4), PoolEntry(gpu="h20-96gb", count=4)]
    link: LinkName | None = "nic-200g"
    kv_dtype: str = "bf16"
    efficiency: EfficiencyPair = EfficiencyPair()

    _m = field_validator("stage_model", "state_model")(classmethod(lambda cls, v: check_model(v)))
    _d = field_validator("kv_dtype")(classmethod(lambda cls, v: check_known(v, DTYPE_BYTES, "dtype")))


    @model_validator(mode="after")
    def _pools(self) -> "MlaCompactSection":
        names = [p.gpu for p in self.pools]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"pools list GPU type(s) {dup} more than once; give one entry per type with its count")
        if sum(p.count for p in self.pools) < 2:
            raise ValueError("pools need at least two GPUs in all so that both P and D are non-empty")
        problem = grid_problem([p.count for p in self.pools], "pools")
        if problem:
            raise ValueError(problem)
        m = MODELS.get(self.state_model)
        if m is not None and m.attention != "mla":
            raise ValueError(f"state_model {m.name!r} is not an MLA model; the compact path needs one such as deepseek-v3")
        return self


class AfSplitScenario(VersionedScenario):
    """Example 9.4 and §9.3.4: AF transfers, α*, whole-request AF vs PD, the micro-batch pipeline."""

    kind: Literal["af-split"] = "af-split"
    af: AfSection = AfSection()
    states: StatesSection = StatesSection()
    pipeline: PipelineSection = PipelineSection()
    mla_compact_path: MlaCompactSection | None = None


# ---------------------------------------------------------------- ep-skew (§9.4.1, example 9.5, §9.4.3)


class RoutingSection(_Strict):
    tokens: NonNegInt = 1024
    top_k: PosInt = 8
    n_experts: PosInt = 256
    hot_expert_rows: NonNegFloat = 128
    ep_sizes: Annotated[list[PosInt], Field(min_length=1)] = [8, 32, 256]
    batches: PosInt = 1000
    seed: NonNegInt = 0
    row_bytes: PosFloat = 8192
    card_bandwidth_bytes_per_s: PosFloat = 50e9

    @model_validator(mode="after")
    def _shape(self) -> "RoutingSection":
        if self.top_k > self.n_experts:
            raise ValueError(
                f"top_k ({self.top_k}) exceeds n_experts ({self.n_experts}); a token chooses top_k distinct experts"
            )
        bad = [ep for ep in self.ep_sizes if self.n_experts % ep]
        if bad:
            raise ValueError(f"ep_sizes {bad} do not divide n_experts ({self.n_experts}); experts are spread evenly by index")
        if self.hot_expert_rows > self.tokens:
            raise ValueError(f"hot_expert_rows ({self.hot_expert_rows}) exceeds tokens ({self.tokens}); a token picks an expert at most once")
        draws = self.top_k * self.tokens * self.batches
        if draws > MAX_SIMULATED_DRAWS or self.n_experts * self.batches > MAX_SIMULATED_DRAWS:
            raise ValueError(
                f"the routing simulation draws top_k × tokens × batches = {draws} expert choices over n_experts × batches = "
                f"{self.n_experts * self.batches} counters, above the {MAX_SIMULATED_DRAWS} the harness simulates in memory; "
                "lower batches (or tokens)")
        return self


class CutEntry(_Strict):
    name: str
    bandwidth_bytes_per_s: PosFloat
    mask: list[list[bool]] | None = None  # (source, group) pairs crossing the cut; default every pair


class ExchangeCase(_Strict):
    name: str
    assignments: Annotated[list[list[Annotated[float, Field(ge=0, allow_inf_nan=False)]]], Field(min_length=1)]
    link: LinkName | None = "cx7-400g"  # each card's own NIC, per direction
    bandwidth_bytes_per_s: PosFloat | None = None  # instead of link
    cuts: list[CutEntry] = Field(default_factory=list)
    dispatch_dtype: str = "bf16"
    combine_dtype: str = "bf16"

    _d = field_validator("dispatch_dtype", "combine_dtype")(classmethod(lambda cls, v: check_known(v, DTYPE_BYTES, "dtype")))


    @model_validator(mode="after")
    def _bw(self) -> "ExchangeCase":
        if self.bandwidth_bytes_per_s is None and self.link is None:
            raise ValueError("give link (a catalog name) or bandwidth_bytes_per_s for each card's link")
        return self

    @property
    def card_bandwidth(self) -> float:
        return self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s is not None else LINKS[self.link].bandwidth_bytes_per_s  # type: ignore[index]


class ExchangeSection(_Strict):
    model: str = "qwen3-235b-a22b"  # hidden width sets bytes per row; 2·P_e the FLOPs per assignment
    gpu: str = "h100-sxm"
    compute_efficiency: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.5
    sources: PosInt = 4
    groups: PosInt = 4
    cases: Annotated[list[ExchangeCase], Field(min_length=1)]

    _m = field_validator("model")(classmethod(lambda cls, v: check_model(v)))
    _g = field_validator("gpu")(classmethod(lambda cls, v: check_known(v, GPUS, "GPU")))

    @model_validator(mode="after")
    def _shapes(self) -> "ExchangeSection":
        names = [c.name for c in self.cases]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"exchange case name(s) {dup} appear more than once; give each case its own name")
        for c in self.cases:
            rows = len(c.assignments)
            cols = {len(r) for r in c.assignments}
            if rows != self.sources or cols != {self.groups}:
                got = f"{rows}×{'/'.join(str(x) for x in sorted(cols))}"
                raise ValueError(
                    f"case {c.name!r}: assignments is {got} but the exchange has {self.sources} sources × {self.groups} "
                    "groups; give one row per source and one column per expert group"
                )
            for cut in c.cuts:
                if cut.mask is not None and (len(cut.mask) != self.sources or {len(r) for r in cut.mask} != {self.groups}):
                    raise ValueError(f"case {c.name!r}: cut {cut.name!r} mask must be {self.sources}×{self.groups}")
        return self


class OverlapSection(_Strict):
    case: str  # which exchange case's three bounds to pipeline
    microbatches: PosInt = 2
    padding_rows: list[NonNegInt] = [32, 16, 8, 4, 2, 1, 1, 0]
    tile_rows: PosInt = 32
    token_branches_s: list[Annotated[list[NonNegFloat], Field(min_length=1)]] = [[0.5e-3, 1.4e-3], [0.3e-3, 1.4e-3]]
    merge_s: NonNegFloat = 0.0


class EpSkewScenario(VersionedScenario):
    """§9.4.1, example 9.5 and §9.4.3: rows per card, random skew, exchange bounds, padding, overlap."""

    kind: Literal["ep-skew"] = "ep-skew"
    routing: RoutingSection = RoutingSection()
    exchange: ExchangeSection | None = None
    overlap: OverlapSection | None = None

    @model_validator(mode="after")
    def _case(self) -> "EpSkewScenario":
        if self.overlap is not None:
            if self.exchange is None:
                raise ValueError("overlap needs an [exchange] section whose case it pipelines")
            names = [c.name for c in self.exchange.cases]
            if self.overlap.case not in names:
                raise ValueError(f"overlap.case {self.overlap.case!r} names no exchange case; cases: {names}")
        return self


# ---------------------------------------------------------------- expert-replicas (§9.4.2, example 9.6)


class CopyEntry(_Strict):
    name: str
    link: LinkName | None = None
    bandwidth_bytes_per_s: PosFloat | None = None
    startup_latency_s: NonNegFloat | None = None


    @model_validator(mode="after")
    def _bw(self) -> "CopyEntry":
        if self.bandwidth_bytes_per_s is None and self.link is None:
            raise ValueError(f"copy {self.name!r}: give link (a catalog name) or bandwidth_bytes_per_s")
        return self

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s is not None else LINKS[self.link].bandwidth_bytes_per_s  # type: ignore[index]

    @property
    def startup(self) -> float:
        if self.startup_latency_s is not None:
            return self.startup_latency_s
        return LINKS[self.link].startup_latency_s if self.link else 5e-6


class HotSection(_Strict):
    model: str = "qwen3-235b-a22b"
    weight_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    gpu: str = "h100-sxm"
    efficiency: EfficiencyPair = EfficiencyPair()
    expert_rows: Annotated[list[NonNegInt], Field(min_length=1)] = [128] * 8  # rows per expert on the hot card
    replicas: NonNegInt = 7
    cards: PosInt = 8
    free_bytes_per_receiver: NonNegFloat = 64 * 2**20
    tile_m: PosInt = 64
    tile_n: PosInt = 128

    _m = field_validator("model")(classmethod(lambda cls, v: check_model(v)))
    _g = field_validator("gpu")(classmethod(lambda cls, v: check_known(v, GPUS, "GPU")))
    _d = field_validator("weight_dtype", "activation_dtype")(classmethod(lambda cls, v: check_known(v, DTYPE_BYTES, "dtype")))

    @model_validator(mode="after")
    def _fit(self) -> "HotSection":
        if self.replicas > len(self.expert_rows):
            raise ValueError(f"replicas ({self.replicas}) exceeds the {len(self.expert_rows)} experts on the hot card")
        if self.replicas > self.cards - 1:
            raise ValueError(f"replicas ({self.replicas}) exceeds the {self.cards - 1} other cards that could receive one each")
        return self


class MemoryBudgetSection(_Strict):
    layers: Annotated[list[NonNegInt], Field(min_length=1)] = [94, 8]
    replicas_per_layer: NonNegInt = 1


class PoolSection(_Strict):
    batches_per_s: NonNegFloat


class ExpertReplicasScenario(VersionedScenario):
    """Example 9.6 and §9.4.2: replica saving, copy cost, payback, memory budget, pool stability."""

    kind: Literal["expert-replicas"] = "expert-replicas"
    hot: HotSection = HotSection()
    copies: Annotated[list[CopyEntry], Field(min_length=1)] = [
        CopyEntry(name="nvlink", link="nvlink-h100"), CopyEntry(name="nic", link="cx7-400g")]
    horizons_batches: list[NonNegInt] = [16, 64]
    free_bytes_checks: list[NonNegFloat] = [64 * 2**20, 32 * 2**20]
    memory_budget: MemoryBudgetSection = MemoryBudgetSection()
    pool: PoolSection | None = None


# kind -> the `harness model` subcommand that runs it
SUBCOMMAND_OF_KIND: dict[str, str] = {
    "experts-cpu-gpu": "experts",
    "af-split": "af",
    "ep-skew": "ep-skew",
    "expert-replicas": "replicas",
}


def _merge(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for k, v in overrides.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_expert_scenario(path: str | Path, cls: type[M], overrides: dict | None = None) -> M:
    """Load a scenario file of the kind `cls` declares, with command-line `overrides` merged in
    before validation (so a bad flag is reported under its field name); a file of another kind is
    refused with the subcommand that runs it."""
    data = load_toml(path)
    if overrides:
        data = _merge(data, overrides)
    want = cls.model_fields["kind"].default
    kind = scenario_kind(data, path)
    if kind != want:
        other = SUBCOMMAND_OF_KIND.get(kind, "plan" if kind == "pd-capacity" else None)
        hint = f"run it with `harness model {other}`" if other else "see `harness model list` for each file's kind"
        raise HarnessError(f"scenario {path} is of kind {kind!r}, not {want!r}; {hint}.")
    return validate_model(cls, data, str(path))


__all__ = [
    "ExpertsCpuGpuScenario", "AfSplitScenario", "EpSkewScenario", "ExpertReplicasScenario",
    "CPU_KERNELS", "NUMA_PATHS", "SUBCOMMAND_OF_KIND", "load_expert_scenario",
]
