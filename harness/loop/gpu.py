"""The loop for GPU engines (vLLM, SGLang): the twin of the engine's scheduler → served load → compare.

1. **Calibrate** with the GPU's own kernels: `harness micro run` and `harness calibrate` write a calibration file whose
   efficiency curves the step times evaluate at each step's size (harness.target.step_times.GpuRooflineStepTimes).
   Without a file the step times use the datasheet with the chapter's default efficiency, and the report says
   "uncalibrated".
2. **Predict** with the twin of the engine's scheduler (harness.target.chunked_prefill) for the seeded workloads and
   rates of the CPU loop (harness.loop.predict).
3. **Measure** with the load generator (harness.loop.points) against the engine launched from its config, or against
   a running deployment (`target_url`).
4. **Compare** and report as the CPU loop (harness.loop.summary; `harness report RUN` renders it).

`compare_stored` is the same predict → compare for points measured elsewhere (a device run's stored load runs,
harness.loop.measure.read_load_run): no engine, no load generator, one LoopReport.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

from harness.calibration.apply import MeasuredConstants
from harness.calibration.file import load_calibration
from harness.engines import http
from harness.engines.config import EngineConfig, load_engine_config
from harness.engines.launcher import RunningEngine
from harness.engines.session import make_plan
from harness.errors import HarnessError
from harness.loop.gpu_telemetry import LoopGpuTelemetry
from harness.loop.options import (DEFAULT_MIXES, DEFAULT_RATE_FRACTIONS, GpuTelemetryOptions, LoopPlan, check_mixes,
                                  check_point_duration, check_rates)
from harness.loop.output import LoopOutput
from harness.loop.points import ProgressFn, measure_all
from harness.loop.predict import burst_capacity, predict, predict_served, served_prediction, twin_capacity, twin_source
from harness.loop.run import print_progress
from harness.loop.state import EngineTarget, LoopState, MeasuredPoint, PlannedPoint, RunResult
from harness.loop.summary import loop_report
from harness.loop_records.report import LoopReport, LoopSettings
from harness.loop_records.verdict import bootstrap_median_interval
from harness.served import ServedMeasurement, ServedPoint
from harness.specs.gpus import get_gpu
from harness.specs.models import MODELS, get_model
from harness.target.chunked_prefill import settings_from_sglang, settings_from_vllm
from harness.target.stage_requests import StageShape
from harness.target.step_times import GpuRooflineStepTimes
from harness.target.twin import TwinSpec
from harness.units import DTYPE_BYTES
from workloads.artifact import WorkloadArtifact
from workloads.config import check_http_url

GPU_POINT_S, GPU_QUICK_POINT_S = 60.0, 10.0


@dataclass(frozen=True)
class GpuLoopOptions:
    """The options of `harness loop gpu`; None means "not set" (the default is then picked)."""

    config: str  # a vLLM or SGLang engine config
    gpu: str  # the GPU spec the engine runs on (harness.specs.gpus)
    model_spec: str | None = None  # catalog model (default: the config's served name)
    calibration: str | None = None  # `harness calibrate` output for this GPU
    dtype: str = "bf16"
    target_url: str | None = None  # measure a running deployment instead of launching the config
    mixes: tuple[tuple[int, int], ...] | None = None  # None: DEFAULT_MIXES
    rate_fractions: tuple[float, ...] | None = None  # None: DEFAULT_RATE_FRACTIONS
    point_duration_s: float | None = None  # None: GPU_POINT_S, GPU_QUICK_POINT_S with quick
    quick: bool = False
    repeats: int | None = None  # None: 1
    seed: int = 0
    results_dir: str | None = "results"
    log_dir: str | None = None
    command_line: tuple[str, ...] = field(default=())
    gpu_telemetry: GpuTelemetryOptions = field(default_factory=GpuTelemetryOptions)  # during the served points

    def __post_init__(self) -> None:
        check_point_duration(self.point_duration_s)
        if self.mixes is not None:
            check_mixes(self.mixes)
        if self.rate_fractions is not None:
            check_rates(self.rate_fractions)
        r = self.repeats
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 10):
            raise HarnessError(f"--repeats must be an integer from 1 to 10, got {r!r}.")
        if self.target_url is not None:
            check_http_url(self.target_url, "--target")

    def plan(self) -> LoopPlan:
        """The served-points layout (no stages: a GPU engine's twin is calibrated from kernel measurements)."""
        return served_plan(self.mixes or DEFAULT_MIXES, self.rate_fractions or DEFAULT_RATE_FRACTIONS,
                           float(self.point_duration_s or (GPU_QUICK_POINT_S if self.quick else GPU_POINT_S)), self.repeats or 1,
                           quick=self.quick, seed=self.seed)


def served_plan(mixes: tuple[tuple[int, int], ...], rates: tuple[float, ...], duration_s: float, repeats: int, *,
                quick: bool = False, seed: int = 0) -> LoopPlan:
    """A plan of served points only (no isolated stages, no capacity burst)."""
    return LoopPlan(shape=StageShape(0, 0, 0), batches=(), reps=0, quick=quick, stages=False, served=True, mixes=mixes,
                    rate_fractions=rates, point_duration_s=duration_s, capacity_requests=0, repeats=repeats, stage_windows=1,
                    copy_cases=False, seed=seed)


def gpu_twin(opts: GpuLoopOptions) -> tuple[EngineConfig, TwinSpec]:
    """(engine config, TwinSpec) for a vLLM / SGLang config on a GPU spec."""
    cfg = load_engine_config(opts.config)
    if cfg.engine not in ("vllm", "sglang"):
        raise HarnessError(f"`harness loop gpu` runs vLLM or SGLang; config {cfg.name!r} is for {cfg.engine!r} (use `harness loop cpu`).")
    if cfg.base.mode == "pd":
        raise HarnessError(f"config {cfg.name!r} is a prefill/decode deployment; the GPU loop twins one engine (mode = \"single\").")
    name = opts.model_spec or cfg.served_name
    if name not in MODELS and not name.endswith((".json", ".gguf")):
        raise HarnessError(f"no model spec for {name!r}; give --model-spec (one of {', '.join(MODELS)} or a config.json path).")
    model = get_model(name)
    gpu = get_gpu(opts.gpu)
    if opts.dtype not in DTYPE_BYTES:
        raise HarnessError(f"--dtype {opts.dtype!r} is unknown; known: {', '.join(DTYPE_BYTES)}.")
    constants = None
    if opts.calibration:
        constants = MeasuredConstants(load_calibration(opts.calibration), opts.calibration)
        if constants.device_for(gpu.name) is None:
            raise HarnessError(f"calibration {opts.calibration} has no constants for {gpu.name}; calibrate that GPU "
                               "(`harness micro run` + `harness calibrate`) or give its proxy in the calibration.")
    st = GpuRooflineStepTimes(gpu, model, opts.dtype, DTYPE_BYTES[opts.dtype], 2.0, constants, None, opts.calibration)
    settings = settings_from_vllm(cfg.options) if cfg.engine == "vllm" else settings_from_sglang(cfg.options)
    return cfg, TwinSpec(cfg.engine, settings, st, model.name, st.source, settings.assumptions)


def _settings(opts: GpuLoopOptions, cfg: EngineConfig, plan: LoopPlan, wall_s: float | None) -> LoopSettings:
    return LoopSettings(cfg.name, plan.mixes, plan.rate_fractions, plan.point_duration_s, plan.seed, plan.repeats, 0, "poisson",
                        plan.quick, gpu=opts.gpu, dtype=opts.dtype, target_url=opts.target_url, loop_wall_s=wall_s)


def run_gpu_loop(opts: GpuLoopOptions, *, progress: ProgressFn | None = print_progress) -> LoopReport:
    """Predict with the twin, measure with load (launching the config unless target_url is given), compare, store."""
    say = progress or (lambda m: None)
    cfg, twin = gpu_twin(opts)
    launch = None if opts.target_url else make_plan(cfg)
    engine = {"name": cfg.engine, "config": cfg.name, "target_url": opts.target_url} if launch is None else launch.manifest_engine()
    model = {"name": twin.model, "spec": asdict(twin.step_times.model)}
    state = LoopState(opts.plan(), notes=list(twin.notes), twin=twin, base_twin=twin)
    out = LoopOutput("loop-gpu", opts.results_dir, engine=engine, command_line=opts.command_line,
                     extra={"loop_settings": _settings(opts, cfg, state.plan, None).to_dict(), "model": model})
    out.twin(twin)
    t0 = time.perf_counter()
    gpu = LoopGpuTelemetry(opts.gpu_telemetry, out)

    def report(status: str = "complete", error: str | None = None) -> LoopReport:
        return loop_report(state, kind="loop-gpu", model=model, engine=engine,
                           settings=_settings(opts, cfg, state.plan, time.perf_counter() - t0), run_dir=out.path,
                           status=status, error=error, say=say)

    try:
        predict_served(state, out, say, revision=1)
        if opts.target_url:
            url = opts.target_url.rstrip("/")
            try:
                http.get(url + "/v1/models", timeout_s=10.0)
            except http.EngineUnreachable as exc:
                raise HarnessError(f"the target {url} is unreachable ({exc}); start the deployment or give the right --target URL.") from None
            measure_all(state, EngineTarget(url, cfg.served_name), out, say, fit=False, gpu=gpu)
        else:
            assert launch is not None
            with RunningEngine(launch, log_dir=opts.log_dir) as running:
                proc = running.procs[0][1] if running.procs else None
                eng = EngineTarget(launch.endpoint, launch.served_name, alive=functools.partial(_alive, running, proc))
                measure_all(state, eng, out, say, fit=False, gpu=gpu)
    except (HarnessError, KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - keep the partial run, then re-raise
        gpu.finish()
        out.finish(report("failed", str(exc)), failed=exc)
        if out.path and isinstance(exc, HarnessError):
            raise HarnessError(f"{exc}\nThe partial loop run is kept at {out.path} (status failed).") from None
        raise
    rep = report()
    gpu.finish()
    out.finish(rep)
    return rep


def _alive(running: RunningEngine, proc: Any) -> None:
    if proc is not None and proc.poll() is not None:
        raise HarnessError(f"the engine exited with code {proc.returncode} during the loop; its log ends:\n"
                           f"{running.log_tail(running.plan.processes[0].role, 1500)}")


@dataclass(frozen=True)
class StoredPoint:
    """A served point measured elsewhere (a device run): the workload as sent and its load runs, one per repeat
    (harness.loop.measure.read_load_run reads a stored load run into a RunResult)."""

    point: ServedPoint
    artifact: WorkloadArtifact
    runs: tuple[RunResult, ...]
    fraction: float = math.nan  # of the capacity it was set at, when known


def compare_stored(twin: TwinSpec, stored: Sequence[StoredPoint], *, duration_s: float, kind: str = "loop-gpu",
                   model: dict[str, Any] | None = None, engine: dict[str, Any] | None = None, config: str = "",
                   say: Callable[[str], None] = lambda m: None) -> LoopReport:
    """The twin's prediction of every stored point (rate points over `duration_s`, bursts by the capacity statistic)
    against its stored runs, judged and summarised exactly as a live loop: the offline comparison of a device run."""
    if not stored:
        raise HarnessError("compare_stored: no stored points to compare; give the device run's load runs.")
    mixes = tuple(dict.fromkeys((int(p.point.input_tokens or 0), int(p.point.output_tokens or 0)) for p in stored))
    plan = served_plan(mixes, tuple(dict.fromkeys(p.fraction for p in stored if not p.point.burst)), duration_s,
                       max(len(p.runs) for p in stored))
    state = LoopState(plan, notes=list(twin.notes), twin=twin, base_twin=twin)
    for sp in stored:
        if not sp.runs:
            raise HarnessError(f"compare_stored: point {sp.point.index} ({sp.point.workload} at {sp.point.load_text()}) has no load run.")
        empty = PlannedPoint(sp.point, sp.fraction, sp.artifact, served_prediction(sp.point, None, None, twin_source(twin)), 0.0)
        p = predict(twin, empty, duration_s)
        state.points.append(p)
        intervals = {m: iv for m, col in (("ttft_p50_s", "ttft_s"), ("tpot_p50_s", "tpot_s"))
                     if not sp.point.burst and (iv := bootstrap_median_interval([r.samples.get(col, ()) for r in sp.runs],
                                                                                seed=sp.point.index)) is not None}
        state.measured[sp.point.index] = MeasuredPoint(sp.runs, ServedMeasurement.median_of([r.served for r in sp.runs],
                                                                                            intervals=intervals))
    bursts = {p.point.workload: p for p in state.points if p.burst}
    for p in state.points:  # the capacity per workload: its burst's, else a long simulated backlog of its lengths
        w = p.point.workload
        if w not in state.capacity:
            state.capacity[w] = (burst_capacity(twin, bursts[w].artifact) if w in bursts else
                                 twin_capacity(twin, (int(p.point.input_tokens or 1), int(p.point.output_tokens or 1)), None))
    state.points = [p if p.burst else replace(p, prediction=replace(
        p.prediction, capacity_requests_per_s=state.capacity[p.point.workload].requests_per_s)) for p in state.points]
    settings = LoopSettings(config, plan.mixes, plan.rate_fractions, duration_s, 0, plan.repeats)
    return loop_report(state, kind=kind, model=model or {"name": twin.model}, engine=engine or {"name": twin.engine},
                       settings=settings, run_dir=None, say=say)


__all__ = ["GpuLoopOptions", "StoredPoint", "compare_stored", "gpu_twin", "run_gpu_loop"]
