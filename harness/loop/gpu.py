"""The same loop for GPU engines (vLLM, SGLang): calibrated GPU constants → the engine's twin → served load → compare.

1. **Calibrate** with the GPU's own kernels: `harness micro run` (bf16/fp8 GEMM at the model's
   shapes, the decode attention kernel) and `harness calibrate` write a calibration file whose
   efficiency curves (prefill compute efficiency by tokens, decode bandwidth efficiency by batch)
   the step times evaluate at each step's size (harness.target.step_times.GpuRooflineStepTimes). Without a file the step
   times use the datasheet with the chapter's default efficiency, and the report says
   "uncalibrated".
2. **Predict** with the twin of the engine's scheduler (harness.target.chunked_prefill:
   vLLM's token budget with mixed steps, SGLang's separate prefill and decode batches), for the
   same seeded workloads and rates as the CPU loop.
3. **Measure** with the load generator, against the engine launched from its config, or against
   a running deployment (`target_url`): the embedded simulated target serving the twin is such a
   target, which is how this path is tested on a CPU.
4. **Compare and report** exactly as the CPU loop (harness.loop.compare, harness.loop.render).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.errors import HarnessError
from harness.loop.compare import served_verdict
from harness.loop.report import LoopReport
from harness.loop.run import (DEFAULT_MIXES, DEFAULT_RATE_FRACTIONS, ProgressFn, measure_points, plan_points, prediction_row,
                              print_progress, served_rows, served_steps, with_measured)


@dataclass(frozen=True)
class GpuLoopOptions:
    config: str  # a vLLM or SGLang engine config
    gpu: str  # the GPU spec the engine runs on (harness.specs.gpus)
    model_spec: str | None = None  # catalog model (default: the config's served name)
    calibration: str | None = None  # `harness calibrate` output for this GPU
    dtype: str = "bf16"
    target_url: str | None = None  # measure a running deployment instead of launching the config
    mixes: tuple[tuple[int, int], ...] = DEFAULT_MIXES
    rate_fractions: tuple[float, ...] = DEFAULT_RATE_FRACTIONS
    point_duration_s: float = 60.0
    seed: int = 0
    results_dir: str | None = "results"
    log_dir: str | None = None
    command_line: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        d = self.point_duration_s
        if not (isinstance(d, (int, float)) and math.isfinite(d) and 2 <= d <= 3600):
            raise HarnessError(f"--point-duration-s must be in [2, 3600] seconds, got {d!r}.")
        if not self.mixes or not self.rate_fractions:
            raise HarnessError("--mixes and --rates must each name at least one value.")
        if self.target_url is not None:
            from workloads.config import check_http_url  # noqa: PLC0415

            check_http_url(self.target_url, "--target")


def gpu_twin(opts: GpuLoopOptions) -> tuple[Any, Any]:
    """(engine config, TwinSpec) for a vLLM / SGLang config on a GPU spec."""
    from harness.engines.config import load_engine_config  # noqa: PLC0415
    from harness.specs.gpus import get_gpu  # noqa: PLC0415
    from harness.specs.models import MODELS, get_model  # noqa: PLC0415
    from harness.target.chunked_prefill import settings_from_sglang, settings_from_vllm  # noqa: PLC0415
    from harness.target.step_times import GpuRooflineStepTimes  # noqa: PLC0415
    from harness.target.twin import TwinSpec  # noqa: PLC0415
    from harness.units import DTYPE_BYTES  # noqa: PLC0415

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
        from harness.calibration.apply import MeasuredConstants  # noqa: PLC0415
        from harness.calibration.file import load_calibration  # noqa: PLC0415

        constants = MeasuredConstants(load_calibration(opts.calibration), opts.calibration)
        if constants.device_for(gpu.name) is None:
            raise HarnessError(f"calibration {opts.calibration} has no constants for {gpu.name}; calibrate that GPU "
                               "(`harness micro run` + `harness calibrate`) or give its proxy in the calibration.")
    st = GpuRooflineStepTimes(gpu, model, opts.dtype, DTYPE_BYTES[opts.dtype], 2.0, constants, None, opts.calibration)
    settings = settings_from_vllm(cfg.options) if cfg.engine == "vllm" else settings_from_sglang(cfg.options)
    return cfg, TwinSpec(cfg.engine, settings, st, model.name, st.source, settings.assumptions)


def run_gpu_loop(opts: GpuLoopOptions, *, progress: ProgressFn | None = print_progress) -> LoopReport:
    """Predict with the twin, measure with load (launching the config unless target_url is given), compare, store."""
    from harness.engines import http  # noqa: PLC0415
    from harness.engines.launcher import RunningEngine  # noqa: PLC0415
    from harness.engines.session import make_plan  # noqa: PLC0415
    from harness.target.twin import twin_dict  # noqa: PLC0415

    say = progress or (lambda m: None)
    cfg, twin = gpu_twin(opts)
    plan = None if opts.target_url else make_plan(cfg)
    engine_d = {"name": cfg.engine, "config": cfg.name, "target_url": opts.target_url} if plan is None else plan.manifest_engine()
    settings: dict[str, Any] = {"config": cfg.name, "gpu": opts.gpu, "dtype": opts.dtype, "mixes": [list(m) for m in opts.mixes],
                                "rate_fractions": list(opts.rate_fractions), "point_duration_s": opts.point_duration_s,
                                "seed": opts.seed, "schedule": "poisson", "target_url": opts.target_url,
                                "load_average_1m_before_after": [None, None], "threads": None, "prompt_tokens": None,
                                "decode_prompt_tokens": None, "output_tokens": None, "reps": None}
    model_d = {"name": twin.model, "spec": asdict(twin.step_times.model)}
    state: dict[str, Any] = {"served": [], "measurements": {}, "capacity": {}, "notes": list(twin.notes)}
    writer = None
    if opts.results_dir is not None:
        from harness.records import new_manifest  # noqa: PLC0415
        from harness.store import RunWriter  # noqa: PLC0415

        writer = RunWriter(new_manifest("loop-gpu", engine=engine_d, command_line=list(opts.command_line) or None,
                                        extra={"loop_settings": settings, "model": model_d}), opts.results_dir)
        writer.write_json("twin.json", twin_dict(twin))
    t0 = time.perf_counter()

    def report(status: str = "complete", error: str | None = None) -> LoopReport:
        rows = served_rows(state)
        settings["loop_wall_s"] = time.perf_counter() - t0
        steps = tuple(served_steps(state, twin, say))  # before the notes are taken: it adds its own
        return LoopReport(model_d, engine_d, None, (), (), (), (), settings, str(writer.path) if writer else None,
                          tuple(state["notes"]), status, error, twin.to_dict(), state["capacity"], tuple(with_measured(state)),
                          tuple(rows), served_verdict(rows) if rows else None, steps)

    try:
        plan_points(state, twin, opts.mixes, opts.rate_fractions, opts.point_duration_s, opts.seed)
        if writer:
            writer.append("loop_prediction", [prediction_row(p) for p in state["served"]])
        if opts.target_url:
            url = opts.target_url.rstrip("/")
            try:
                http.get(url + "/v1/models", timeout_s=10.0)
            except http.EngineUnreachable as exc:
                raise HarnessError(f"the target {url} is unreachable ({exc}); start the deployment or give the right --target URL.") from None
            measure_points(url, cfg.served_name, state["work"], state, twin, opts.point_duration_s, writer, None, 1, say)
        else:
            assert plan is not None
            with RunningEngine(plan, log_dir=opts.log_dir) as eng:
                proc = eng.procs[0][1] if eng.procs else None

                def alive() -> None:
                    if proc is not None and proc.poll() is not None:
                        raise HarnessError(f"the engine exited with code {proc.returncode} during the loop; its log ends:\n"
                                           f"{eng.log_tail(plan.processes[0].role, 1500)}")

                measure_points(plan.endpoint, plan.served_name, state["work"], state, twin, opts.point_duration_s, writer, None, 1, say, alive)
    except (HarnessError, KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - keep the partial run, then re-raise
        rep = report("failed", str(exc))
        if writer:
            _finish_gpu(writer, rep, exc)
            if isinstance(exc, HarnessError):
                raise HarnessError(f"{exc}\nThe partial loop run is kept at {writer.path} (status failed).") from None
        raise
    rep = report()
    if writer:
        _finish_gpu(writer, rep, None)
    return rep


def _finish_gpu(writer: Any, rep: LoopReport, failed: BaseException | None) -> None:
    if rep.served_comparisons:
        writer.append("loop_served_comparison", [c.to_dict() for c in rep.served_comparisons])
    if rep.served_steps:
        writer.append("loop_served_steps", [r.to_dict() for r in rep.served_steps])
    writer.write_json("loop_report.json", rep.to_dict())
    writer.__exit__(type(failed) if failed else None, failed, None)

