"""One workload artifact against two targets, then the comparison (`harness compare-engines`).

A target is written as one string (so `make compare-engines A=... B=...` passes it through):
  http://host:port                       an OpenAI-compatible server already running
  CONFIG[,section.key=value,...]         an engine config (workloads/engines/ name or TOML path) launched
                                         here, with overrides, e.g. llama-cpp-gemma3-270m,llama_cpp.parallel=1
  embedded[,key=value,...]               the embedded simulated target (harness.target), e.g.
                                         embedded,profile=fixed,ttft_s=0.05,itl_s=0.02 or
                                         embedded,scenario=workloads/scenarios/ch9-hetero-pd.toml,time_scale=0.1
The artifact is built once (or read from --workload) and replayed against A, then against B, one
target at a time (each launched, loaded and stopped before the next, so they do not share the
CPUs); each run is stored like any load run with `compare_label` and the artifact hash in its
manifest, and the runs are compared with harness.compare (pairing by artifact). With several
rates, each rate is one artifact and one pair; the report draws latency-vs-throughput curves.
"""

from __future__ import annotations

import json
import math
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from harness.bench.load import run_load
from harness.engines.config import parse_engine_config, resolve_config_path
from harness.engines.launcher import RunningEngine
from harness.engines.session import make_plan
from harness.errors import HarnessError
from harness.records import new_run_id
from harness.target.process import start_target
from harness.toml_file import load_toml, set_dotted, value_or_word
from workloads.artifact import load_artifact, save_artifact
from workloads.config import LoadConfig, SummaryOptions, check_http_url
from workloads.gpu_telemetry import local_sampling
from workloads.mixes import build_mix
from workloads.schedule import make_schedule

EMBEDDED_KEYS = {"profile": str, "scenario": str, "mode": str, "allocation": str, "startup_s": float, "time_scale": float,
                 "ttft_s": float, "itl_s": float, "model_name": str}


@dataclass(frozen=True)
class TargetSpec:
    kind: str  # "url" | "engine" | "embedded"
    text: str  # as given
    url: str | None = None
    config: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _value(raw: str) -> Any:
    return value_or_word(raw)


def parse_target(text: str, flag: str) -> TargetSpec:
    """Parse --a / --b; every malformed part is named with the fix."""
    t = (text or "").strip()
    if not t:
        raise HarnessError(f"{flag}: empty; give a URL (http://127.0.0.1:8000), an engine config "
                           "(llama-cpp-gemma3-270m,llama_cpp.parallel=1) or embedded[,profile=fixed,itl_s=0.02].")
    if "://" in t:
        return TargetSpec("url", t, url=check_http_url(t, flag))
    head, *parts = [p.strip() for p in t.split(",")]
    overrides: dict[str, Any] = {}
    for p in parts:
        key, sep, raw = p.partition("=")
        if not sep or not key.strip() or not raw.strip():
            raise HarnessError(f"{flag}: cannot read {p!r} in {t!r}; write KEY=VALUE after the target, comma-separated.")
        overrides[key.strip()] = _value(raw.strip())
    if head == "embedded":
        for k, v in overrides.items():
            if k not in EMBEDDED_KEYS:
                raise HarnessError(f"{flag}: embedded target has no setting {k!r}; known: {', '.join(EMBEDDED_KEYS)}.")
            want = EMBEDDED_KEYS[k]
            if want is float and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
                raise HarnessError(f"{flag}: embedded {k} must be a number >= 0, got {v!r}.")
        if overrides.get("profile", "fixed" if "scenario" not in overrides else "scenario") == "scenario" and "scenario" not in overrides:
            raise HarnessError(f"{flag}: embedded profile=scenario needs scenario=PATH (e.g. workloads/scenarios/ch9-hetero-pd.toml).")
        return TargetSpec("embedded", t, overrides=overrides)
    for k in overrides:
        if "." not in k:
            raise HarnessError(f"{flag}: engine override {k!r} must name its section, e.g. llama_cpp.parallel=2 or server.port=0.")

    return TargetSpec("engine", t, config=str(resolve_config_path(head)), overrides=overrides)


def engine_config_with_overrides(spec: TargetSpec) -> Any:
    """Load the TOML, set the dotted overrides, validate (errors name the overridden field)."""

    path = Path(spec.config or "")
    data = load_toml(path, "engine config")
    for key, v in spec.overrides.items():
        set_dotted(data, key, v, "override", str(path))
    source = f"{path}" + (f" with {', '.join(f'{k}={v!r}' for k, v in spec.overrides.items())}" if spec.overrides else "")
    return parse_engine_config(data, source)


@dataclass
class _Live:
    url: str
    model: str
    engine: dict[str, Any]
    scrape: list[dict[str, str]]
    extra: dict[str, Any]


@contextmanager
def serve(spec: TargetSpec, bound_s: float) -> Iterator[_Live]:
    """Make the target reachable for the duration of the block, then stop what was started here."""
    if spec.kind == "url":
        yield _Live(spec.url or "", "default", {"name": "external", "simulated": False, "url": spec.url},
                    [{"role": "all", "url": f"{spec.url}/metrics"}], {})
        return
    if spec.kind == "embedded":
        o = dict(spec.overrides)
        profile = o.pop("profile", "fixed" if "scenario" not in o else "scenario")
        args = ["--profile", str(profile)]
        for k, v in o.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        target = start_target(args, max_lifetime_s=bound_s)
        try:
            model = target.info.get("model") or o.get("model_name") or "harness-fixed"
            yield _Live(target.url, str(model), {"name": "harness-simulated", "simulated": True, **target.info},
                        [{"role": "all", "url": f"{target.url}/metrics"}], {"time_scale": o.get("time_scale", 1.0)})
        finally:
            target.stop()
        return

    cfg = engine_config_with_overrides(spec)
    plan = make_plan(cfg, resolve=True)
    with RunningEngine(plan) as eng:
        scrape = [{"role": p.role, "url": p.base_url + p.metrics_path} for p in plan.processes if p.metrics_path]
        ttr = eng.time_to_ready
        yield _Live(plan.endpoint, plan.served_name, plan.manifest_engine(), scrape,
                    {"time_to_ready_s": ttr.ready_s if ttr else None, "engine_config": cfg.to_dict()})


@dataclass(frozen=True)
class CompareEnginesOptions:
    a: str
    b: str
    duration_s: float = 20.0
    rates_per_s: tuple[float, ...] = (1.0,)
    schedule: str = "poisson"
    input_tokens: int = 64
    output_tokens: int = 16
    workload_path: str | None = None
    seed: int = 0
    api: str = "chat"
    max_concurrency: int = 64
    request_timeout_s: float = 60.0
    warmup_s: float = 0.0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    label_a: str | None = None
    label_b: str | None = None
    results_dir: str = "results"
    command_line: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.duration_s, (int, float)) and 0 < self.duration_s <= 24 * 3600):
            raise HarnessError(f"--duration-s must be in (0, 86400] seconds, got {self.duration_s!r}.")
        if not self.rates_per_s or any(not (isinstance(r, (int, float)) and 0 < r < 1e6) for r in self.rates_per_s):
            raise HarnessError(f"--rate must be positive requests per second (comma-separated for a sweep), got {self.rates_per_s!r}.")
        if len(set(self.rates_per_s)) != len(self.rates_per_s):
            raise HarnessError(f"--rate lists a rate twice ({self.rates_per_s}); give each rate once.")
        if self.workload_path and len(self.rates_per_s) > 1:
            raise HarnessError("--workload replays one artifact; give one --rate or drop --workload to build one per rate.")
        for f in ("input_tokens", "output_tokens", "max_concurrency"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"--{f.replace('_', '-')} must be an integer >= 1, got {v!r}.")
        if self.schedule not in ("poisson", "constant", "gamma"):
            raise HarnessError(f"--schedule must be poisson, constant or gamma, got {self.schedule!r}.")


@dataclass(frozen=True)
class CompareEnginesResult:
    run_dirs_a: tuple[str, ...]
    run_dirs_b: tuple[str, ...]
    artifacts: tuple[str, ...]

    @property
    def ordered(self) -> list[str]:
        """A's runs first, so within each artifact A is the baseline."""
        return [*self.run_dirs_a, *self.run_dirs_b]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_artifacts(o: CompareEnginesOptions, workdir: Path) -> list[Path]:
    if o.workload_path:
        load_artifact(o.workload_path)
        return [Path(o.workload_path)]
    out = []
    for rate in o.rates_per_s:
        kw = {"cv": 2.0} if o.schedule == "gamma" else {}
        sched = make_schedule(o.schedule, rate_per_s=rate, duration_s=o.duration_s, seed=o.seed, **kw)
        art = build_mix("scenario", sched, seed=o.seed, api=o.api, input_tokens=o.input_tokens, output_tokens=o.output_tokens)
        out.append(save_artifact(art, workdir))
    return out


def compare_engines(o: CompareEnginesOptions, progress=None) -> CompareEnginesResult:
    """Run every artifact against A, then against B; returns the run directories."""
    specs = {"a": parse_target(o.a, "--a"), "b": parse_target(o.b, "--b")}
    labels = {"a": o.label_a or f"A: {o.a}", "b": o.label_b or f"B: {o.b}"}
    if labels["a"] == labels["b"]:
        raise HarnessError(f"--label-a and --label-b are both {labels['a']!r}; give distinct labels.")
    workdir = Path(tempfile.mkdtemp(prefix="harness-compare-engines-"))
    artifacts = build_artifacts(o, workdir)
    drain_s = o.request_timeout_s + 10.0
    bound_s = len(artifacts) * (o.duration_s + drain_s + 60.0) + 300.0
    dirs: dict[str, list[str]] = {"a": [], "b": []}
    for side in ("a", "b"):
        with serve(specs[side], bound_s) as live:
            for art in artifacts:
                cfg = LoadConfig(
                    target_url=live.url, artifact_path=str(art), run_id=new_run_id(f"compare-{side}"),
                    results_dir=o.results_dir, model=live.model, workers=0, max_concurrency=o.max_concurrency,
                    request_timeout_s=o.request_timeout_s, drain_timeout_s=drain_s, scrape=live.scrape,
                    extra_body={"ignore_eos": True},
                    summary=SummaryOptions(warmup_s=o.warmup_s, slo_ttft_s=o.slo_ttft_s, slo_tpot_s=o.slo_tpot_s),
                    manifest_extra={"command_line": list(o.command_line) or ["harness", "compare-engines"],
                                    "bench": "compare-engines", "scenario": f"compare-engines:{o.input_tokens}in-{o.output_tokens}out",
                                    "compare_label": labels[side], "compare_side": side, "target": specs[side].to_dict(),
                                    **live.extra},
                    engine=live.engine, progress=progress is not None,
                    gpu_local=local_sampling(live.url),  # GPU telemetry beside the requests when the engine runs on a GPU here
                )
                dirs[side].append(str(run_load(cfg, workdir, progress=progress, timeout_s=o.duration_s + drain_s + 120.0)))
    return CompareEnginesResult(tuple(dirs["a"]), tuple(dirs["b"]), tuple(str(a) for a in artifacts))
