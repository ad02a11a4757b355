"""bench-pd end to end: build the workload, start the embedded target if no URL is given, drive the load
process (harness.bench.load), show progress, stop everything, render the report, and return where the run went.

`bench_pd` is what `harness bench-pd` calls: the chapter's PD scenario at its arrival rate for a
bounded time against the embedded (simulated) target or a real deployment, then the report.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.bench.load import run_load
from harness.bench.load_extras import load_config_fields
from harness.bench.pd_options import BenchPdOptions
from harness.bench.progress import Progress
from harness.bench.workload import build_workload, closed_loop_pool
from harness.errors import HarnessError
from harness.model.plan import plan
from harness.model.record import as_json
from harness.records import new_run_id
from harness.report.bench_pd import plan_describes_target, render
from harness.specs.scenario import load_scenario
from harness.store import Run
from harness.target.des import simulate
from harness.target.prediction import PREDICTION_FILE, predict_artifact
from harness.target.process import start_target
from harness.target.twin import requests_from_rows
from harness.target.twin_source import is_local_url, load_target_twin
from workloads.artifact import load_artifact
from workloads.config import LoadConfig, SummaryOptions
from workloads.preflight import preflight, simulated_target
from workloads.run_extras import run_extras
from workloads.steady import in_flight_series, steady_start
from workloads.summary import LoadSummary, read_summary


@dataclass(frozen=True)
class BenchPdResult:
    run_dir: str
    report_paths: list[str]
    summary: LoadSummary
    target: str  # "simulated (embedded)" or the URL
    prediction: dict[str, Any] | None = None  # a real target's twin prediction (harness.target.prediction), simulated
    extras: dict[str, Any] | None = None  # GPU telemetry per phase, prefix reuse, profile, early stop (load_extras.RunExtras)
    simulated: bool = False  # the embedded emulator, or a target that said so (X-Harness-Simulated: true)
    embedded: bool = False  # the scenario's deployment emulated here
    plan_predicts: bool = False  # the target emulates the run's scenario: its plan is the prediction (no twin lines)

    @property
    def valid(self) -> bool:
        return self.summary.valid

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Target:
    """The server a run loads: where it is, what to scrape, and what it is (stored as the run's engine record)."""

    url: str
    scrape: list[dict[str, str]]
    engine: dict[str, Any]
    model: str
    label: str
    process: Any = None  # the embedded target's TargetProcess, stopped after the run

    @property
    def simulated(self) -> bool:
        return bool(self.engine.get("simulated"))


def reach_target(opts: BenchPdOptions, scenario: Any) -> Target:
    """Start the embedded target, or describe the one at --target URL (simulated when it says so in its headers)."""
    if opts.target_url is None:
        args = ["--scenario", opts.scenario, "--time-scale", str(opts.time_scale), "--allocation", opts.allocation]
        if opts.startup_s is not None:
            args += ["--startup-s", str(opts.startup_s)]
        proc = start_target(args, max_lifetime_s=opts.duration_s + opts.request_timeout_s + 600)
        url = proc.url
        scrape = [{"role": "all", "url": f"{url}/metrics"}, {"role": "prefill", "url": f"{url}/prefill/metrics"},
                  {"role": "decode", "url": f"{url}/decode/metrics"}]
        return Target(url, scrape, {"name": "harness-simulated", "simulated": True, **proc.info},
                      proc.info.get("model", scenario.workload.model), "simulated (embedded)", proc)
    url = opts.target_url
    scrape = [{"role": "all", "url": opts.metrics_url or f"{url}/metrics"}]
    if opts.prefill_metrics_url:
        scrape.append({"role": "prefill", "url": opts.prefill_metrics_url})
    if opts.decode_metrics_url:
        scrape.append({"role": "decode", "url": opts.decode_metrics_url})

    key = LoadConfig(target_url=url, artifact_path="-", run_id="probe", api_key_env=opts.api_key_env).api_key()
    sim = simulated_target(url, api_key=key, timeout_s=min(30.0, opts.request_timeout_s))
    engine: dict[str, Any] = {"name": "external", "simulated": False, "url": url}
    if sim is not None:  # every run against a target that says it is simulated carries the word
        engine = {"name": "external", "simulated": True, "simulated_by": "header", "url": url, "info": sim}
    return Target(url, scrape, engine, opts.model_name or scenario.workload.model, url)


def planned_scenario(opts: BenchPdOptions, scenario: Any) -> Any:
    """The scenario the model column predicts: the embedded target emulates the startup --startup-s gave it, so the
    plan's startup backlog and drain (§9.6.1) are of that startup, not the scenario file's (a deadline no later than
    it is dropped: the backlog cannot clear before the service is ready)."""
    if opts.target_url is not None or opts.startup_s is None:
        return scenario
    st = scenario.startup
    deadline = st.deadline_s if st.deadline_s is not None and st.deadline_s > opts.startup_s else None
    return scenario.model_copy(update={"startup": st.model_copy(update={"startup_s": float(opts.startup_s),
                                                                        "deadline_s": deadline})})


def bench_pd(opts: BenchPdOptions, progress: Progress | None = None) -> BenchPdResult:
    """The run's steps, in order: check the twin, reach the target, pre-flight, size a closed loop's pool, build the
    workload, predict it (twin), load, report."""
    s = load_scenario(opts.scenario)
    twin = None
    if opts.calibration is not None:  # every fact of the twin checked before anything is built or sent

        twin = load_target_twin(opts.calibration, engine_config=opts.engine_config, proxy=opts.proxy,
                                target_local=is_local_url(opts.target_url))
    workdir = Path(tempfile.mkdtemp(prefix="harness-bench-"))
    target = None
    prediction = None
    try:
        target = reach_target(opts, s)
        model = opts.model_name or target.model
        if opts.preflight and opts.target_url is not None:  # an external target; the embedded one was just seen listening

            key_cfg = LoadConfig(target_url=target.url, artifact_path="-", run_id="preflight", api_key_env=opts.api_key_env)
            preflight(target.url, model=model, api=opts.api, api_key=key_cfg.api_key(),
                      timeout_s=min(60.0, opts.request_timeout_s), extra_body={"ignore_eos": True})
        pool_note = None
        if opts.concurrency and opts.num_requests is None and not opts.workload_path:
            pool = closed_loop_pool(opts, s, target.url if target.process is None else None, model=model)
            opts, pool_note = replace(opts, num_requests=pool.requests), pool.basis
        artifact_path = build_workload(opts, s, workdir)

        # GPU telemetry, profile window, early stop: checked before anything starts (harness.bench.load_extras)
        extra_fields = load_config_fields(opts, load_artifact(artifact_path), target_url=opts.target_url)
        plan_path = workdir / "plan.json"
        plan_path.write_text(json.dumps(as_json(plan(planned_scenario(opts, s), include_grid=False))))
        sidecars: dict[str, str] = {}
        if twin is not None:  # before the load: the prediction cannot peek at the measurement

            opts = twin_window(twin, artifact_path, opts)
            prediction = predict_run(twin, artifact_path, opts).to_dict()
            pred_path = workdir / PREDICTION_FILE
            pred_path.write_text(json.dumps(prediction, default=str))
            sidecars[PREDICTION_FILE] = str(pred_path)
        cfg = LoadConfig(
            **extra_fields,
            target_url=target.url, artifact_path=str(artifact_path), run_id=new_run_id("bench-pd"), results_dir=opts.results_dir,
            model=model, api_key_env=opts.api_key_env, workers=opts.workers,
            remote_workers=opts.remote_workers, master_bind_host=opts.master_bind_host, master_port=opts.master_port,
            max_concurrency=opts.concurrency or opts.max_concurrency, request_timeout_s=opts.request_timeout_s,
            drain_timeout_s=opts.request_timeout_s + 10.0, scrape=target.scrape, fetch_emit_log=target.process is not None,
            extra_body={"ignore_eos": True}, plan_path=str(plan_path), sidecars=sidecars,
            summary=SummaryOptions(warmup_s=opts.warmup_s, warmup_auto=opts.warmup_auto, warmup_source=opts.warmup_source,
                                   cooldown_s=opts.cooldown_s, slo_ttft_s=opts.slo_ttft_s,
                                   slo_tpot_s=opts.slo_tpot_s, slo_e2e_s=opts.slo_e2e_s, max_error_fraction=opts.max_error_fraction),
            manifest_extra={"command_line": opts.command_line or list(sys.argv), "bench": "bench-pd", "scenario": s.name,
                            "scenario_path": opts.scenario, "options": {k: v for k, v in opts.to_dict().items() if k != "command_line"},
                            "target": target.label, "time_scale": opts.time_scale if target.process is not None else None,
                            "load_mode_label": opts.load_mode, **({"closed_loop_pool": pool_note} if pool_note else {}),
                            **({"run_group": opts.run_group} if opts.run_group else {})},
            engine=target.engine, engine_process=opts.engine_process,
        )
        wait_s = cfg.worker_wait_s if opts.remote_workers else 0.0
        run_dir = run_load(cfg, workdir, progress=progress, timeout_s=opts.duration_s + cfg.drain_timeout_s + 120.0 + wait_s)
    finally:
        if target is not None and target.process is not None:
            target.process.stop()

        shutil.rmtree(workdir, ignore_errors=True)  # the artifact was copied into the run directory
    run = Run(run_dir)
    paths: list[str] = []
    if opts.report_dir:
        paths = [str(p) for p in render(run, Path(opts.report_dir) / run.manifest.run_id)]
    summary = read_summary(run).load

    return BenchPdResult(str(run_dir), paths, summary, target.label, prediction, run_extras(run).to_dict(), target.simulated,
                         target.process is not None, plan_describes_target(target.engine, s.name))


def twin_window(twin: Any, artifact_path: str | Path, opts: BenchPdOptions) -> BenchPdOptions:
    """With --calibration and a measured window, the prediction and the measurement must share one window, fixed before
    the run: where the twin's own simulation of this artifact settled (the same MSER-5 rule, workloads.steady)."""
    if not opts.warmup_auto:
        return opts

    art = load_artifact(artifact_path)
    end_s = max(opts.warmup_s, art.span_s - opts.cooldown_s)
    run = simulate(twin.spec.make_scheduler, requests_from_rows(art.rows))
    series = in_flight_series(run.arrival_s, run.finished_s, end_s)
    start = steady_start(series).start_s if series is not None else None
    if start is None:
        return replace(opts, warmup_auto=False, warmup_source=f"--warmup-s {opts.warmup_s:g} (the twin's simulation of this "
                       f"workload never settled before {end_s:g} s, so there is no predicted steady start)")
    w0 = max(opts.warmup_s, round(start, 3))
    return replace(opts, warmup_s=w0, warmup_auto=False,
                   warmup_source=f"the twin's predicted steady start: its simulation of this workload settled at {start:.1f} s")


def predict_run(twin: Any, artifact_path: str | Path, opts: BenchPdOptions) -> Any:
    """The twin's prediction (harness.target.prediction.TargetPrediction, simulated) for the artifact this run sends,
    over the load generator's window (same span, warm-up and cool-down)."""
    art = load_artifact(artifact_path)
    if art.closed_loop:
        raise HarnessError("--calibration: the twin simulates open-loop arrivals; this workload is closed loop. "
                           "Drop --calibration or give an open-loop workload.")
    span_s = art.span_s
    rate = float((art.meta.get("schedule") or {}).get("mean_rate_per_s") or (art.count / span_s if span_s > 0 else 0.0))
    try:
        return predict_artifact(twin.spec, art.rows, span_s=span_s, rate_per_s=rate, warmup_s=opts.warmup_s,
                                cooldown_s=opts.cooldown_s, source=twin.source, notes=twin.notes,
                                workload_content_hash=art.content_hash)
    except HarnessError as exc:
        raise HarnessError(f"--calibration: the twin cannot predict this workload: {exc} Drop --calibration or change the "
                           "workload.") from None
