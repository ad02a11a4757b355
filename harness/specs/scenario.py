"""Scenario files: one validated TOML file per worked example (format in docs/scenarios.md)."""

from __future__ import annotations

from pathlib import Path
import importlib
from typing import Annotated, Callable, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness import toml_file
from harness.errors import HarnessError
from harness.specs.gpus import GPUS
from harness.specs.limits import context_problem, resident_tokens_problem
from harness.specs.links import DEFAULT_STARTUP_LATENCY_S, LINKS, intra_node_link
from harness.specs.models import MODELS, get_model, model_paths_relative_to, resolve_model_ref, tensor_parallel_problem
from harness.units import DTYPE_BYTES
from harness.validation_errors import error_lines
from harness.versioning import load_versioned, version_problem

SCENARIO_SCHEMA_VERSION = 1
# Format history (every scenario kind; harness.versioning applies the steps on load, newer files are refused;
# a file without schema_version is at the current version): 1 — first version (workload, pools, link,
# efficiency, startup, cost, reference_allocations, sensitivity, deployment).
SCENARIO_UPGRADES: dict[int, Callable[[dict], dict]] = {}

PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


def scenario_version(v: int) -> int:
    """A validator of every scenario kind's schema_version (the text comes from harness.versioning)."""
    problem = version_problem(v, SCENARIO_SCHEMA_VERSION)
    if problem:
        raise ValueError(problem)
    return v


def check_link(v: str) -> str:
    """`v` when it names a link of the catalog (harness.specs.links); else a ValueError listing them."""
    if v not in LINKS:
        raise ValueError(f"unknown link {v!r}; known: {', '.join(LINKS)} (see `harness specs links`)")
    return v


LinkName = Annotated[str, AfterValidator(check_link)]  # a scenario field naming a link of the catalog


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class WorkloadSpec(_Strict):
    model: str
    input_tokens: Annotated[int, Field(ge=1)]
    output_tokens: Annotated[int, Field(ge=1)]
    cached_prefix_tokens: Annotated[int, Field(ge=0)] = 0
    decode_batch: Annotated[int, Field(ge=1)] = 32
    arrival_rate_per_s: NonNegFloat = 0.0
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if v not in MODELS and not v.endswith((".json", ".gguf")):
            raise ValueError(f"unknown model {v!r}; known: {', '.join(MODELS)}, or a path to a Hugging Face config.json or a .gguf file")
        v = resolve_model_ref(v)
        if v.endswith(".gguf") and not Path(v).expanduser().is_file():
            raise ValueError(f"model {v!r}: the GGUF file does not exist; give the path to a .gguf file")
        return v

    @model_validator(mode="after")
    def _gguf_dtype(self) -> "WorkloadSpec":
        # a GGUF's shape comes from the file, but the plan's weight bytes from weight_dtype: never assume bf16 silently
        if self.model.endswith(".gguf") and "weight_dtype" not in self.model_fields_set:
            raise ValueError(f"model {self.model!r} is a GGUF: give workload.weight_dtype explicitly (e.g. \"int4\" for a Q4 file, "
                             "\"int8\" for Q8_0), the plan's bytes per parameter come from it")
        return self

    @field_validator("weight_dtype", "kv_dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {v!r}; known: {', '.join(DTYPE_BYTES)}")
        return v

    @model_validator(mode="after")
    def _prefix(self) -> "WorkloadSpec":
        problem = (context_problem(self.input_tokens, "input_tokens") or context_problem(self.output_tokens, "output_tokens")
                   or context_problem(self.input_tokens + self.output_tokens, "input_tokens + output_tokens"))
        if problem:
            raise ValueError(problem)
        if self.cached_prefix_tokens >= self.input_tokens:
            raise ValueError(
                f"cached_prefix_tokens ({self.cached_prefix_tokens}) must be below input_tokens "
                f"({self.input_tokens}); the last input token is always recomputed"
            )
        return self


class PoolSpec(_Strict):
    gpu: str
    count: Annotated[int, Field(ge=1)]  # cards; the size of the PD search is bounded by the model (capacity.MAX_PD_ALLOCATIONS)
    tp: Annotated[int, Field(ge=1, le=64)] = 1  # cards per instance (tensor parallel); count must be a multiple
    # MoE experts over `ep` groups of tp/ep cards of the instance (harness.model.parallel.Parallel: moe_tp × ep = tp)
    ep: Annotated[int, Field(ge=1, le=64)] = 1
    pp: Annotated[int, Field(ge=1)] = 1  # pipeline stages: only 1 is planned (refused with the fix otherwise)
    link: LinkName | None = None  # the cards' link for the all-reduces (default: the GPU's NVLink / PCIe, specs.links)

    @model_validator(mode="after")
    def _whole_instances(self) -> "PoolSpec":
        if self.pp > 1:
            raise ValueError(f"pp = {self.pp}: pipeline parallelism is not planned by the capacity model (its instances "
                             "are tensor-parallel groups, §9.1.1); give pp = 1 (or leave it out) and split the model with "
                             "tp, and ep for a MoE model")
        if self.tp % self.ep:
            ok = ", ".join(str(e) for e in range(1, self.tp + 1) if self.tp % e == 0)
            raise ValueError(f"ep = {self.ep} does not divide tp = {self.tp}: the experts are spread over the instance's "
                             f"{self.tp} cards in ep groups of tp/ep cards; give ep = one of {ok} (or a larger tp)")
        if self.count % self.tp:
            raise ValueError(f"count = {self.count} cards do not form whole TP{self.tp} instances; give a multiple of "
                             f"{self.tp} or another tp")
        if self.tp > 1 and self.link is None and intra_node_link(self.gpu) is None:
            raise ValueError(f"tp = {self.tp} needs the cards' link for its all-reduces and the catalog has none for "
                             f"{self.gpu}; give link = one of {', '.join(LINKS)}")
        return self

    @property
    def instances(self) -> int:
        return self.count // self.tp

    @property
    def tp_link(self):
        """The link the instance's all-reduces run on (None for tp = 1)."""
        if self.tp == 1:
            return None
        return LINKS[self.link] if self.link else intra_node_link(self.gpu)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        if v not in GPUS:
            raise ValueError(f"unknown GPU {v!r}; known: {', '.join(GPUS)}")
        return v


class LinkSection(_Strict):
    spec: LinkName | None = None
    bandwidth_bytes_per_s: PosFloat | None = None
    startup_latency_s: NonNegFloat | None = None


    @model_validator(mode="after")
    def _one(self) -> "LinkSection":
        if self.spec is None and self.bandwidth_bytes_per_s is None:
            raise ValueError("give link.spec (a catalog name) or link.bandwidth_bytes_per_s")
        return self

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s is not None else LINKS[self.spec].bandwidth_bytes_per_s  # type: ignore[index]

    @property
    def startup(self) -> float:
        if self.startup_latency_s is not None:
            return self.startup_latency_s
        return LINKS[self.spec].startup_latency_s if self.spec else DEFAULT_STARTUP_LATENCY_S

    @property
    def label(self) -> str:
        return self.spec or f"custom {self.bandwidth / 1e9:g} GB/s"


class EfficiencyPair(_Strict):
    compute: Fraction = 0.5
    bandwidth: Fraction = 0.5


class EfficiencySection(EfficiencyPair):
    per_gpu: dict[str, EfficiencyPair] = Field(default_factory=dict)

    @field_validator("per_gpu")
    @classmethod
    def _gpus(cls, v: dict[str, EfficiencyPair]) -> dict[str, EfficiencyPair]:
        for g in v:
            if g not in GPUS:
                raise ValueError(f"unknown GPU {g!r} in efficiency.per_gpu; known: {', '.join(GPUS)}")
        return v


class StartupSection(_Strict):
    startup_s: NonNegFloat = 0.0
    deadline_s: PosFloat | None = None

    @model_validator(mode="after")
    def _order(self) -> "StartupSection":
        if self.deadline_s is not None and self.deadline_s <= self.startup_s:
            raise ValueError(f"deadline_s ({self.deadline_s}) must be later than startup_s ({self.startup_s})")
        return self


class CostSection(_Strict):
    price_per_hour: NonNegFloat
    currency: str = "CNY"
    slo_fraction: Fraction | None = None


class ReferenceAllocation(_Strict):
    name: str
    prefill: dict[str, Annotated[int, Field(ge=0)]]


class SensitivitySection(_Strict):
    efficiency_scale: list[PosFloat] = Field(default_factory=list)


class DeploymentSection(_Strict):
    compare_states: list[str] = Field(default_factory=list)  # other models whose KV state to compare (e.g. "deepseek-v3")
    shared_pool_bytes: PosFloat | None = None

    @field_validator("compare_states")
    @classmethod
    def _states(cls, v: list[str]) -> list[str]:
        for m in v:
            if m not in MODELS and not m.endswith(".json"):
                raise ValueError(f"unknown model {m!r} in deployment.compare_states; known: {', '.join(MODELS)}")
        return v


class Scenario(_Strict):
    """The PD capacity scenario (kind "pd-capacity"): §9.1–9.2, §9.6.1, §9.7."""

    schema_version: int = SCENARIO_SCHEMA_VERSION
    kind: Literal["pd-capacity"] = "pd-capacity"
    name: str
    description: str = ""
    source: str = ""
    workload: WorkloadSpec
    pools: Annotated[list[PoolSpec], Field(min_length=1)]
    link: LinkSection | None = None
    efficiency: EfficiencySection = EfficiencySection()
    startup: StartupSection = StartupSection()
    cost: CostSection | None = None
    reference_allocations: list[ReferenceAllocation] = Field(default_factory=list)
    sensitivity: SensitivitySection = SensitivitySection()
    deployment: DeploymentSection = DeploymentSection()

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        return scenario_version(v)

    @model_validator(mode="after")
    def _cross(self) -> "Scenario":
        names = [p.gpu for p in self.pools]
        w = self.workload
        memory = sum(GPUS[p.gpu].hbm_capacity_bytes * p.count for p in self.pools)
        problem = resident_tokens_problem(w.decode_batch, w.input_tokens + w.output_tokens, memory, "all pools together")
        if problem:
            raise ValueError(f"workload.{problem}")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"pools list GPU type(s) {sorted(dup)} more than once; give one entry per type with its count")
        for ref in self.reference_allocations:
            for g, k in ref.prefill.items():
                if g not in names:
                    raise ValueError(f"reference allocation {ref.name!r} names GPU {g!r} that no pool has; pools: {names}")
                pool = next(p for p in self.pools if p.gpu == g)
                if k > pool.count:
                    raise ValueError(f"reference allocation {ref.name!r} puts {k} {g} in P but the pool has {pool.count}")
                if k % pool.tp:
                    raise ValueError(f"reference allocation {ref.name!r} puts {k} {g} in P, not whole TP{pool.tp} instances; "
                                     f"give a multiple of {pool.tp}")
        if any(p.tp > 1 or p.ep > 1 for p in self.pools):
            try:
                m = get_model(w.model)
            except HarnessError as exc:
                raise ValueError(str(exc).rstrip(".")) from None
            for i, p in enumerate(self.pools):
                problem = tensor_parallel_problem(m, p.tp, field=f"pools[{i}].tp") or expert_parallel_problem(m, p.ep, i)
                if problem:
                    raise ValueError(problem)
        return self


def expert_parallel_problem(m, ep: int, pool: int) -> str | None:
    """Why `ep` cannot spread the experts of model `m` (None when it can): only a MoE model has experts, and `ep`
    must divide its routed experts (they are spread evenly by index, §9.4.1)."""
    if ep == 1:
        return None
    field = f"pools[{pool}].ep = {ep}"
    if not m.is_moe:
        return f"{field}: {m.name} is a dense model (no experts to spread); give ep = 1 (or leave it out)"
    if m.n_routed_experts % ep:
        ok = [e for e in (2, 4, 8, 16, 32, 64) if m.n_routed_experts % e == 0]
        return (f"{field} does not divide the {m.n_routed_experts} routed experts of {m.name}; give ep = one of "
                f"{', '.join(map(str, ok)) or '1'} that also divides tp")
    return None


M = TypeVar("M", bound=BaseModel)

# scenario kind -> "module:Class" of its pydantic model; extensions add one line each
SCENARIO_KINDS: dict[str, str] = {
    "pd-capacity": "harness.specs.scenario:Scenario",
    "experts-cpu-gpu": "harness.specs.scenario_experts:ExpertsCpuGpuScenario",
    "af-split": "harness.specs.scenario_experts:AfSplitScenario",
    "ep-skew": "harness.specs.scenario_experts:EpSkewScenario",
    "expert-replicas": "harness.specs.scenario_experts:ExpertReplicasScenario",
    "kv-tiers": "harness.specs.scenario_kv:KvTiersScenario",
    "cache-routing": "harness.specs.scenario_kv:CacheRoutingScenario",
    "lifecycle": "harness.specs.scenario_kv:LifecycleScenario",
}


def validate_model(cls: type[M], data: dict, source: str) -> M:
    """Validate `data` (upgraded to the current schema_version) against a pydantic model; errors name the field."""
    data = load_versioned(data, SCENARIO_SCHEMA_VERSION, SCENARIO_UPGRADES, f"scenario {source}",
                          default=SCENARIO_SCHEMA_VERSION, what="scenario", fix="see docs/scenarios.md")
    base = Path(source).resolve().parent if Path(source).is_file() else None
    try:
        with model_paths_relative_to(base):  # a config.json path in the file means next to the file
            return cls.model_validate(data)
    except ValidationError as exc:
        raise HarnessError("\n".join([f"scenario {source} is invalid:", *error_lines(exc, "docs/scenarios.md")])) from None


SCENARIO_DIR = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A path as given, or a name `harness model list` prints (with or without .toml) of workloads/scenarios/."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    if len(p.parts) == 1:
        for cand in (SCENARIO_DIR / p.name, SCENARIO_DIR / f"{p.name}.toml"):
            if cand.is_file():
                return cand
    return p


def load_toml(path: str | Path) -> dict:
    return toml_file.load_toml(resolve_scenario_path(path), "scenario",
                               "scenarios live in workloads/scenarios/ (try `harness model list`)")


def scenario_class(kind: str) -> type[BaseModel]:
    if kind not in SCENARIO_KINDS:
        raise HarnessError(f"scenario kind {kind!r} is unknown; known kinds: {', '.join(SCENARIO_KINDS)}.")
    mod, _, cls = SCENARIO_KINDS[kind].partition(":")
    return getattr(importlib.import_module(mod), cls)


def scenario_kind(data: dict, path: str | Path) -> str:
    """The file's `kind` (default "pd-capacity"); a non-string is refused with the known kinds."""
    kind = data.get("kind", "pd-capacity")
    if not isinstance(kind, str):
        raise HarnessError(f"scenario {path}: kind must be a string, one of {', '.join(SCENARIO_KINDS)}; got {kind!r}.")
    return kind


def load_any_scenario(path: str | Path) -> BaseModel:
    """Load a scenario of any registered kind (the `kind` field, default "pd-capacity")."""
    path = resolve_scenario_path(path)
    data = load_toml(path)
    return validate_model(scenario_class(scenario_kind(data, path)), data, str(path))


def parse_scenario(data: dict, source: str = "<dict>") -> Scenario:
    return validate_model(Scenario, data, source)


def load_scenario(path: str | Path) -> Scenario:
    """Load a PD capacity scenario (a path, or a name `harness model list` prints); a file of another kind is refused."""
    path = resolve_scenario_path(path)
    data = load_toml(path)
    kind = scenario_kind(data, path)
    if kind != "pd-capacity":
        raise HarnessError(
            f"scenario {path} is of kind {kind!r}, not a PD capacity scenario; use the `harness model` subcommand for that kind."
        )
    return parse_scenario(data, str(path))
