"""Engine configs: one validated TOML file per serving deployment (format in docs/engines.md).

A config has common sections ([model], [server], [startup]), one section named after its engine
([llama_cpp], [vllm] or [sglang]) validated by that engine's module, and, for a prefill/decode
disaggregated launch (mode = "pd"), a [pd] section with the workers and the router. Every error
names the field, the value and the fix.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.engines import ENGINES
from harness.errors import HarnessError
from harness.toml_file import load_toml
from harness.validation_errors import error_lines
from harness.versioning import load_versioned, version_problem

ENGINE_CONFIG_SCHEMA_VERSION = 1
# Format history (harness.versioning applies the steps on load, newer files are refused; a file without
# schema_version is at the current version): 1 — first version (model, server, startup, one engine section, pd).
ENGINE_CONFIG_UPGRADES: dict[int, Any] = {}

ENGINE_CONFIG_DIR = Path(__file__).resolve().parents[2] / "workloads" / "engines"

Port = Annotated[int, Field(ge=0, le=65535)]
FixedPort = Annotated[int, Field(ge=1, le=65535)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Strict(BaseModel):
    """Base of every config section: unknown fields are errors, values are not coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelSection(Strict):
    path: str | None = None  # a local GGUF file (llama.cpp) or model directory (vLLM, SGLang)
    gguf_package: str | None = None  # a Python distribution whose assemble() returns a GGUF path
    hf_id: str | None = None  # a Hugging Face repository id (vLLM, SGLang)
    served_name: str | None = None  # the `model` field clients send; default: the config name

    @model_validator(mode="after")
    def _one(self) -> "ModelSection":
        given = [k for k in ("path", "gguf_package", "hf_id") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of model.path, model.gguf_package, model.hf_id (got {given or 'none'})"
            )
        return self


class ServerSection(Strict):
    host: str = "127.0.0.1"
    port: Port = 0  # the client-facing port (the router's in pd mode); 0 picks a free port at launch
    env: dict[str, str] = Field(default_factory=dict)  # added to the inherited environment
    extra_args: list[str] = Field(default_factory=list)  # appended verbatim to the server's command

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("host must not be empty; use 127.0.0.1 for a local engine")
        return v


class StartupSection(Strict):
    timeout_s: PosFloat = 300.0  # give up (and stop everything) when not ready by then
    poll_interval_s: PosFloat = 0.1
    probe_prompt: str = "Hello"  # the first completed request of the time-to-ready measurement
    probe_max_tokens: Annotated[int, Field(ge=1)] = 1
    stop_timeout_s: PosFloat = 15.0  # SIGTERM, then SIGKILL after this long


class EngineConfigBase(Strict):
    schema_version: int = ENGINE_CONFIG_SCHEMA_VERSION
    name: str
    engine: str
    description: str = ""
    mode: Literal["single", "pd"] = "single"
    model: ModelSection
    server: ServerSection = ServerSection()
    startup: StartupSection = StartupSection()

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        if v not in ENGINES:
            raise ValueError(f"unknown engine {v!r}; known: {', '.join(ENGINES)}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("name must not be empty")
        return v

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        problem = version_problem(v, ENGINE_CONFIG_SCHEMA_VERSION)
        if problem:
            raise ValueError(problem)
        return v


@dataclass(frozen=True)
class EngineConfig:
    """A validated engine config: the common sections, the engine's options and its [pd] section."""

    base: EngineConfigBase
    options: BaseModel  # the engine module's Options model
    pd: BaseModel | None  # the engine module's PdOptions model, in pd mode
    source: str  # file path or "<dict>"

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def engine(self) -> str:
        return self.base.engine

    @property
    def served_name(self) -> str:
        return self.base.model.served_name or self.base.name

    def to_dict(self) -> dict[str, Any]:
        d = self.base.model_dump()
        d[engine_module(self.engine).SECTION] = self.options.model_dump()
        if self.pd is not None:
            d["pd"] = self.pd.model_dump()
        d["source"] = self.source
        return d


def engine_module(engine: str) -> Any:
    if engine not in ENGINES:
        raise HarnessError(f"engine {engine!r} is unknown; known: {', '.join(ENGINES)}.")
    return importlib.import_module(ENGINES[engine])


def _invalid(source: str, lines: list[str]) -> HarnessError:
    return HarnessError("\n".join([f"engine config {source} is invalid:", *lines]))


def parse_engine_config(data: dict, source: str = "<dict>") -> EngineConfig:
    """Validate a config dict: common sections first, then the engine's own section and [pd]."""
    if not isinstance(data, dict):
        raise HarnessError(f"engine config {source} must be a table of sections, got {type(data).__name__}.")
    data = load_versioned(data, ENGINE_CONFIG_SCHEMA_VERSION, ENGINE_CONFIG_UPGRADES, f"engine config {source}",
                          default=ENGINE_CONFIG_SCHEMA_VERSION, what="engine config", fix="see docs/engines.md")
    engine = data.get("engine")
    if not isinstance(engine, str) or engine not in ENGINES:
        raise _invalid(source, [f"  engine: must be one of {', '.join(ENGINES)} (got {engine!r})"])
    mod = engine_module(engine)
    rest = dict(data)
    section = rest.pop(mod.SECTION, {})
    pd_raw = rest.pop("pd", None)
    lines: list[str] = []
    base = options = pd = None
    try:
        base = EngineConfigBase.model_validate(rest)
    except ValidationError as exc:
        lines += error_lines(exc, "docs/engines.md")
    if not isinstance(section, dict):
        lines.append(f"  {mod.SECTION}: must be a table ([{mod.SECTION}]), got {section!r}")
    else:
        try:
            options = mod.Options.model_validate(section)
        except ValidationError as exc:
            lines += error_lines(exc, "docs/engines.md", mod.SECTION)
    mode = data.get("mode", "single")
    if mode == "pd":
        if mod.PdOptions is None:
            lines.append(f"  mode: engine {engine!r} has no prefill/decode disaggregated launch (got 'pd'); use mode = \"single\"")
        elif pd_raw is None:
            lines.append("  pd: missing; mode = \"pd\" needs a [pd] section with prefill and decode workers and a router")
        else:
            try:
                pd = mod.PdOptions.model_validate(pd_raw)
            except ValidationError as exc:
                lines += error_lines(exc, "docs/engines.md", "pd")
    elif pd_raw is not None:
        lines.append(f"  pd: a [pd] section needs mode = \"pd\" (mode is {mode!r}); set the mode or remove the section")
    if lines:
        raise _invalid(source, lines)
    cfg = EngineConfig(base=base, options=options, pd=pd, source=source)  # type: ignore[arg-type]
    problems = mod.check(cfg)
    if problems:
        raise _invalid(source, [f"  {p}" for p in problems])
    return cfg


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A path to a TOML file, or the stem of one in workloads/engines/."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    cand = ENGINE_CONFIG_DIR / f"{name_or_path}.toml"
    if cand.is_file():
        return cand
    known = sorted(q.stem for q in ENGINE_CONFIG_DIR.glob("*.toml"))
    raise HarnessError(
        f"engine config {str(name_or_path)!r} does not exist; give a TOML file or one of: {', '.join(known) or 'none'} "
        f"(from {ENGINE_CONFIG_DIR})."
    )


def load_engine_config(name_or_path: str | Path) -> EngineConfig:
    p = resolve_config_path(name_or_path)
    return parse_engine_config(load_toml(p, "engine config", f"configs live in {ENGINE_CONFIG_DIR}"), str(p))


def port_and_gpu_conflicts(ports: dict[str, int], gpus: dict[str, list[int]]) -> list[str]:
    """Problems when two processes of one launch share a port or a GPU; keys name the fields."""
    out: list[str] = []
    seen: dict[int, str] = {}
    for where, p in ports.items():
        if p and p in seen:
            out.append(f"{where}: port {p} is already used by {seen[p]}; give each process its own port")
        elif p:
            seen[p] = where
    owner: dict[int, str] = {}
    for where, ids in gpus.items():
        if len(set(ids)) != len(ids):
            out.append(f"{where}: lists a GPU twice ({ids}); give distinct GPU indices")
        for g in ids:
            if g in owner and owner[g] != where:
                out.append(f"{where}: GPU {g} is already given to {owner[g]}; prefill and decode workers need their own GPUs")
            owner.setdefault(g, where)
    return out
