"""The CPU loop end to end: calibrate → predict → measure → compare → store (kind loop-cpu).

Order matters on a small host. The calibration runs with the engine stopped (the two would compete for the cores).
The twin predicts every served point of the seeded workloads before the engine starts (the prediction cannot peek at a
measurement). The engine is then launched once: the isolated stages (stage window 1) correct the twin and the points
are set again from its corrected capacity; the time budget cuts the rest to fit; each served point (then each capacity
burst) is measured `repeats` times back to back, with the stages measured again between the points (later windows).
Once the engine has stopped, every point is predicted anew from the median of the windows' corrections (stage data
only: the points stay held out), compared, judged and stored. The run is written as it goes (results/<machine>/
<run_id>/): a failure midway (bad model, engine crash, unreachable target) keeps what was measured, status "failed".
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from harness.engines import http
from harness.engines.config import EngineConfig, load_engine_config, parse_engine_config
from harness.engines.launcher import LaunchPlan, RunningEngine
from harness.engines.llama_cpp import resolve_model
from harness.engines.session import make_plan, terminate_as_interrupt
from harness.errors import HarnessError
from harness.loop.calibrate import calibrate_cpu, step_times
from harness.loop.fit_budget import fit_rest, plan_windows, quick_drain_limit_s
from harness.loop.gpu_telemetry import LoopGpuTelemetry
from harness.loop.measure import completion_body, settle_slots, token_prompt
from harness.loop.options import GpuTelemetryOptions, LoopOptions, LoopPlan, plan_for
from harness.loop.output import LoopOutput
from harness.loop.points import measure_all, send_fitted
from harness.loop.predict import predict, predict_served, predict_stages
from harness.loop.stages import measure_stage_window
from harness.loop.state import EngineTarget, LoopState, PlannedPoint
from harness.loop.summary import loop_report
from harness.loop.windows import window_points, windowed_predictions
from harness.loop_records.report import LoopReport, LoopSettings
from harness.loop_records.stages import CONTENDED_SHARE
from harness.loop_records.windows import StageWindow
from harness.specs.gguf_model import GgufModel, read_gguf
from harness.target.corrections import corrected_twin
from harness.target.llama_server import LlamaServerSettings, settings_from_engine
from harness.target.twin import TwinSpec, llama_cpp_twin

ProgressFn = Callable[[str], None]


def print_progress(msg: str) -> None:
    """A progress line on stderr, stamped with the local time (where a long loop spends it can be read off the log)."""
    print(f"[loop {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class CpuSetup:
    """What the loop runs against, read and checked before anything is measured."""

    cfg: EngineConfig
    gm: GgufModel
    sched: LlamaServerSettings
    launch: LaunchPlan
    threads: int
    model: dict[str, Any]  # the model's facts, as the manifest and the report record them


def engine_config_for(config: str, model: str | None) -> EngineConfig:
    """The engine config, with its model replaced by a GGUF path when one is given (any GGUF, any llama.cpp flags)."""
    cfg = load_engine_config(config)
    if cfg.engine != "llama.cpp":
        raise HarnessError(f"the CPU loop runs llama.cpp; config {cfg.name!r} is for {cfg.engine!r}. "
                           "Give a llama.cpp config (e.g. llama-cpp-gemma3-270m) or use `harness loop gpu` for vLLM / SGLang.")
    if model is None:
        return cfg
    p = Path(model).expanduser()
    if not p.is_file():
        raise HarnessError(f"--model {model!r} does not exist; give the path to a .gguf file.")
    d = cfg.to_dict()
    d.pop("source", None)
    d["model"] = {"path": str(p), "served_name": p.stem}
    return parse_engine_config(d, f"{cfg.source} with --model {p}")


def setup_for(opts: LoopOptions) -> CpuSetup:
    """The engine config, its GGUF (a missing file or one without tensors stops here) and scheduler settings."""
    cfg = engine_config_for(opts.config, opts.model)
    gm = read_gguf(resolve_model(cfg))
    sched = settings_from_engine(cfg.options, cfg.base.server.extra_args, sliding_window=gm.sliding_window,
                                 n_ctx_train=gm.context_length)
    model = {"gguf": gm.path, "architecture": gm.architecture, "file_type": gm.file_type, "spec": asdict(gm.spec),
             "weight_bytes": gm.weight_bytes, "streamed_weight_bytes": gm.streamed_weight_bytes,
             "streamed_weight_bytes_per_param": gm.streamed_weight_bytes_per_param, "sliding_window": gm.sliding_window,
             "context_length": gm.context_length}
    return CpuSetup(cfg, gm, sched, make_plan(cfg), cfg.options.threads or os.cpu_count() or 1, model)  # type: ignore[attr-defined]


def twin_for(s: CpuSetup, state: LoopState, opts: LoopOptions) -> TwinSpec:
    """The engine's digital twin: its scheduler settings from the config; step times from the engine's own step-time
    calibration when given, else the roofline with the host constants just calibrated."""
    if opts.calibration:
        return llama_cpp_twin(s.cfg, opts.calibration, proxy=opts.proxy, gm=s.gm)
    st = step_times(s.gm, state.constants)  # type: ignore[arg-type]
    return TwinSpec("llama.cpp", s.sched, st, s.gm.path, st.source, ())


def check_plan(plan: LoopPlan, sched: LlamaServerSettings) -> None:
    """User errors a plan can hold for this engine, before anything is measured."""
    sh = plan.shape
    need = max([sh.prompt_tokens + 1, sh.decode_prompt_tokens + sh.output_tokens] if plan.stages else [0])
    need = max([need] + ([i + o for i, o in plan.mixes] if plan.served else []))
    if need > sched.n_ctx_slot:
        raise HarnessError(f"a request needs up to {need} tokens of context but each slot has ctx_size / parallel = "
                           f"{sched.n_ctx_slot}; lower --prompt-tokens/--output-tokens/--mixes or raise llama_cpp.ctx_size.")
    if plan.stages and max(plan.batches) > sched.slots:
        raise HarnessError(f"--batches {max(plan.batches)} exceeds the engine's llama_cpp.parallel = {sched.slots} slots; "
                           "a larger batch would queue.")


def settings_of(state: LoopState, s: CpuSetup, load_before: float, wall_s: float | None) -> LoopSettings:
    p = state.plan
    return LoopSettings(s.cfg.name, p.mixes, p.rate_fractions, p.point_duration_s, p.seed, p.repeats,
                        p.capacity_requests, "poisson", p.quick, s.threads, p.shape.prompt_tokens, p.shape.decode_prompt_tokens,
                        p.shape.output_tokens, p.batches, p.reps, p.n_windows if p.stages else 0,
                        tuple(p.window_reps(w) for w in range(p.n_windows)) if p.stages else (), "f16 (llama.cpp default)",
                        load_average_before=load_before, load_average_after=os.getloadavg()[0] if wall_s is not None else None,
                        loop_wall_s=wall_s, time_to_ready=state.time_to_ready,
                        time_budget=state.budget.to_dict() if state.budget else None,
                        window_plan=state.window_plan.to_dict() if state.window_plan else None)


def run_loop(opts: LoopOptions | None = None, *, progress: ProgressFn | None = print_progress, **kw: Any) -> LoopReport:
    """Calibrate (engine stopped), predict, launch, measure, compare, store. Keyword arguments build LoopOptions."""
    opts = LoopOptions(**kw) if opts is None else replace(opts, **kw) if kw else opts
    say = progress or (lambda m: None)
    load_before = os.getloadavg()[0]  # other work on the host shows up in both calibration and measurement
    s = setup_for(opts)
    state = LoopState(plan_for(opts, s.sched.slots))
    check_plan(state.plan, s.sched)
    out = LoopOutput("loop-cpu", opts.results_dir, engine=s.launch.manifest_engine(), command_line=opts.command_line,
                     extra={"loop_settings": settings_of(state, s, load_before, None).to_dict(), "model": s.model})
    t_start = time.perf_counter()
    gpu = LoopGpuTelemetry(opts.gpu_telemetry, out)  # sampled during the served points (harness.loop.gpu_telemetry)
    died: list[tuple[Any, Any]] = []
    restore = terminate_as_interrupt()  # `kill` ends the loop like Ctrl-C: the engine is stopped, the partial run kept

    def report(status: str = "complete", error: str | None = None) -> LoopReport:
        return loop_report(state, kind="loop-cpu", model=s.model, engine=s.launch.manifest_engine(),
                           settings=settings_of(state, s, load_before, time.perf_counter() - t_start), run_dir=out.path,
                           status=status, error=error, say=say)

    try:
        calibrate_and_predict(state, s, opts, out, say)
        say(f"starting {s.launch.engine} ({s.cfg.name}) for the measurement")
        with RunningEngine(s.launch, log_dir=opts.log_dir) as running:
            proc = running.procs[0][1] if running.procs else None
            eng = EngineTarget(s.launch.endpoint, s.launch.served_name, s.gm.spec.vocab_size, proc.pid if proc else None,
                               s.threads, functools.partial(_alive, running, proc))
            try:
                state.time_to_ready = running.time_to_ready.to_dict() if running.time_to_ready else None
                measure_on_engine(state, s, opts, eng, out, t_start, say, gpu)
            except BaseException:
                if _died(proc):
                    died.append((running, proc))
                raise
        if len(state.windows) > 1:  # the engine is stopped: every point predicted anew from its windows
            windowed_predictions(state, state.plan.shape, state.plan.point_duration_s, out, say)
    except (HarnessError, KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - keep the partial run, then re-raise
        err = f"{type(exc).__name__}: {exc}" if not isinstance(exc, HarnessError) else str(exc)
        if died and "exited with code" not in err:
            try:
                _alive(*died[0])
            except HarnessError as cause:  # the engine's death is the cause; the request error is its symptom
                err = f"{cause}\n(the loop then failed with: {err})"
                exc = HarnessError(err)
        gpu.finish()
        out.finish(report("failed", err), failed=exc)
        if out.path and isinstance(exc, HarnessError):
            raise HarnessError(f"{exc}\nThe partial loop run is kept at {out.path} (status failed).") from None
        raise
    finally:
        restore()
    rep = report()
    gpu.finish()
    out.finish(rep)
    return rep


def calibrate_and_predict(state: LoopState, s: CpuSetup, opts: LoopOptions, out: LoopOutput, say: ProgressFn) -> None:
    """The engine stopped: the host constants, the stages' roofline prediction, the twin and every point's prediction."""
    say(f"calibrating {s.gm.spec.name} constants on {s.threads} threads (engine stopped)")
    state.constants = c = calibrate_cpu(s.gm, prompt_tokens=opts.prompt_tokens, threads=s.threads, quick=opts.quick)
    if c.cpu_share is not None and c.cpu_share < CONTENDED_SHARE:
        state.note(f"CONTENDED calibration: the calibration got {c.cpu_share:.0%} of its {s.threads} cores (other processes "
                   "ran), so C_mm and B_ws understate this host and every prediction inherits that; rerun on an idle host", say)
    out.calibration(c)
    if state.plan.stages:
        state.stage_predictions = predict_stages(s.gm, c, state.plan.shape, state.plan.batches)
    state.twin = state.base_twin = twin_for(s, state, opts)
    state.notes += list(state.twin.notes)
    out.twin(state.twin)
    if state.plan.served:
        predict_served(state, out, say, revision=1)


def measure_on_engine(state: LoopState, s: CpuSetup, opts: LoopOptions, eng: EngineTarget, out: LoopOutput, t_start: float,
                      say: ProgressFn, gpu: LoopGpuTelemetry | None = None) -> None:
    """With the engine running: warm it up, stage window 1 (and the twin's corrections), the time budget, then every
    point with the later stage windows between them."""
    http.post_json(eng.url + "/v1/completions",  # the first requests after load page weights in and size buffers
                   completion_body(eng.served_name, token_prompt(min(opts.prompt_tokens, 64), 1, int(eng.vocab or 0)), 2))
    plan = state.plan
    if plan.stages and plan.served and opts.budget_s is not None:
        plan_windows(state, opts, state.twin, s.sched.slots, bool(s.sched.prompt_cache_ram), time.perf_counter() - t_start, say)  # type: ignore[arg-type]
    if plan.stages:
        say("measuring isolated stages (prefill, decode at each batch)"
            + (f": window 1 of {state.plan.n_windows}" if state.plan.n_windows > 1 else ""))
        stage_window(state, s, eng, out, t_start, after_point=None)
        if s.sched.prompt_cache_ram and not state.plan.copy_cases:
            state.note("the prompt cache's copy of a slot state was not measured (--quick or --no-copy-cases; --copy-cases "
                       "measures it): the twin has no copy term, and its request overhead is read from the isolated "
                       "prefills, which include the copy of the request before them", say)
        correct_twin(state, out, say)
    if plan.served and opts.budget_s is not None:
        fit_rest(state, opts, state.twin, s.sched.slots, time.perf_counter() - t_start, out, say)  # type: ignore[arg-type]
    if state.plan.served:
        measure_points(state, s, eng, out, t_start, say, gpu)


def stage_window(state: LoopState, s: CpuSetup, eng: EngineTarget, out: LoopOutput, t_start: float, after_point: int | None) -> None:
    """One stage window, its requests into state.checks and the loop_requests table."""
    w, t0, spent = len(state.windows), time.perf_counter(), {}  # type: ignore[var-annotated]
    _, cs = measure_stage_window(eng, state.plan, s.sched, window=w, measured=state.stage_measurements if w == 0 else None,
                                 checks=state.checks, spent=spent)
    state.windows.append(StageWindow(w, t0 - t_start, after_point, len(cs), time.perf_counter() - t0, dict(spent)))
    out.requests(cs)


def correct_twin(state: LoopState, out: LoopOutput, say: ProgressFn) -> None:
    """The twin corrected by stage window 1 (harness.target.corrections); the points are then set and predicted anew
    from its capacity (the rates are fractions of the capacity of the twin that is compared). Still held out."""
    twin, notes = corrected_twin(state.base_twin, [c for c in state.checks if c.window == 0], state.plan.shape)  # type: ignore[arg-type]
    for n in notes:
        state.note(n, say)
    state.twin = twin
    if notes and state.plan.served:
        out.twin(twin)
        predict_served(state, out, say, revision=2)


def measure_points(state: LoopState, s: CpuSetup, eng: EngineTarget, out: LoopOutput, t_start: float, say: ProgressFn,
                   gpu: LoopGpuTelemetry | None = None) -> None:
    """Every point fitted to the tokenizer (re-predicted when a prompt could not be made exact), started from the slot
    order the twin starts from (`settle_slots`), its drain cut with --quick; then its later stage window, if one follows."""
    plan, twin = state.plan, state.twin
    after = set(window_points([p.point.index for p in state.points], plan.n_windows)) if state.windows else set()

    def prepare(p: PlannedPoint) -> PlannedPoint:
        sent, inexact = send_fitted(eng, p, state.notes)
        if inexact and not sent.burst:  # the counts the engine will see
            sent = predict(twin, sent, plan.point_duration_s)  # type: ignore[arg-type]
            out.predictions([sent], revision=3)
        return sent

    def window_after(p: PlannedPoint) -> None:
        if p.point.index in after:
            eng.alive()
            say(f"stage window {len(state.windows) + 1} of {plan.n_windows}: the isolated stages again, after served point "
                f"{p.point.index + 1}")
            stage_window(state, s, eng, out, t_start, after_point=p.point.index)

    measure_all(state, eng, out, say, prepare=prepare, after=window_after,
                drain_limit_s=lambda p: quick_drain_limit_s(twin, p.artifact, plan.point_duration_s) if plan.quick and not p.burst else None,  # type: ignore[arg-type]
                settle=functools.partial(settle_slots, eng.url, eng.served_name, int(eng.vocab or 0), s.sched.slots), gpu=gpu)


def _alive(running: RunningEngine, proc: Any) -> None:
    """The engine must still be running; a crash mid-loop is an error with its log tail."""
    if proc is not None and proc.poll() is not None:
        raise HarnessError(f"the engine exited with code {proc.returncode} during the loop; its log ends:\n"
                           f"{running.log_tail(running.plan.processes[0].role, 1500)}")


def _died(proc: Any) -> bool:
    """Did the engine die by itself? (checked before the context manager stops it; a dying process resets its
    connections a moment before it can be reaped, so it gets a second)"""
    if proc is None:
        return False
    try:
        proc.wait(timeout=1.0)
        return True
    except subprocess.TimeoutExpired:
        return False


__all__ = ["GpuTelemetryOptions", "LoopOptions", "engine_config_for", "print_progress", "run_loop"]
