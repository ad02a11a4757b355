"""`harness engine CONFIG`: check a config, print its commands, or launch the engine, measure its time-to-ready,
optionally run bench-pd against it and cross-check the load generator with the engine's counters, stop.

`harness engine CONFIG --bench-pd` = launch (time-to-ready), scrape /metrics, run harness.bench.pd's
bench_pd against the engine's endpoint, scrape again, compare client totals with the counter
deltas (harness.engines.crosscheck), store everything with the engine run, stop.
Text output is harness.report.engine's; this module only runs things.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.bench.pd import BenchPdOptions, bench_pd
from harness.bench.progress import LoadProgress
from harness.engines import metrics as prom
from harness.engines.config import ENGINE_CONFIG_DIR, EngineConfig
from harness.engines.crosscheck import CrossRow, crosscheck_llama_cpp
from harness.engines.launcher import LaunchPlan, RunningEngine
from harness.engines.session import SessionResult, make_plan, run_session
from harness.errors import HarnessError
from harness.report.engine import ready_lines
from harness.store import Run
from workloads.summary import LoadSummary

DEFAULT_SCENARIO = ENGINE_CONFIG_DIR / "bench-pd-cpu-gemma3.toml"


@dataclass(frozen=True)
class BenchCheck:
    api: str
    run_dir: str
    report_paths: list[str]
    summary: LoadSummary
    rows: list[CrossRow]
    prediction: dict[str, Any] | None = None  # the twin's prediction (simulated), with --calibration

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api, "run_dir": self.run_dir, "report_paths": self.report_paths, "summary": self.summary.to_dict(),
                "crosscheck": [r.to_dict() for r in self.rows], "prediction": self.prediction}


def bench_pd_against(eng: RunningEngine, *, scenario: str | Path = DEFAULT_SCENARIO, duration_s: float = 20.0,
                     rate_per_s: float | None = None, api: str = "chat", results_dir: str = "results",
                     report_dir: str | None = "reports", quiet: bool = True, calibration: str | None = None,
                     engine_config: str | None = None, proxy: bool = False, request_timeout_s: float = 120.0,
                     threads: int | None = None) -> BenchCheck:
    """bench-pd against the launched engine; with `calibration` its twin predicts the run first (`engine_config`: the
    config the engine was launched from, whose scheduler the twin runs or is checked against). The engine runs on this
    host, so its CPU share over the run is judged as the loop judges it (`threads`: its threads; default the cores)."""
    if eng.plan.engine != "llama.cpp":
        raise HarnessError(f"--bench-pd cross-checks llama.cpp's counters; {eng.plan.engine} has other metric names (not done).")
    metrics_proc = next((p for p in eng.plan.processes if p.metrics_path), None)
    if metrics_proc is None:
        raise HarnessError("--bench-pd needs the engine's /metrics for the cross-check; set llama_cpp.metrics = true.")

    opts = BenchPdOptions(scenario=str(scenario), target_url=eng.plan.endpoint, model_name=eng.plan.served_name,
                          metrics_url=metrics_proc.base_url + metrics_proc.metrics_path, duration_s=duration_s,
                          rate_per_s=rate_per_s, api=api, results_dir=results_dir, report_dir=report_dir,
                          request_timeout_s=request_timeout_s,
                          command_line=["harness", "engine", eng.plan.config_name, "--bench-pd"],
                          # no pre-flight request: the launcher saw the engine healthy, and the cross-check below
                          # counts every token the engine generated between the two scrapes
                          preflight=False, calibration=calibration, engine_config=engine_config if calibration else None,
                          proxy=proxy if calibration else False,
                          engine_process=_engine_process(eng, metrics_proc, threads))
    before = prom.scrape(metrics_proc.base_url, metrics_proc.metrics_path)
    res = bench_pd(opts, progress=None if quiet else LoadProgress())
    after = prom.scrape(metrics_proc.base_url, metrics_proc.metrics_path)
    rows = crosscheck_llama_cpp(Run(res.run_dir).table("requests"), before, after)
    return BenchCheck(api, res.run_dir, res.report_paths, res.summary, rows, res.prediction)



def _engine_process(eng: RunningEngine, spec: Any, threads: int | None) -> dict[str, int] | None:
    """{pid, threads} of the launched process that serves (and is scraped); None when it is not running here."""
    for s, proc, _log in getattr(eng, "procs", ()):
        if s is spec and proc.poll() is None:
            return {"pid": int(proc.pid), "threads": int(threads or os.cpu_count() or 1)}
    return None


@dataclass(frozen=True)
class EngineCheck:
    """`harness engine CONFIG --check`: the config is valid; whether the engine is installed here."""

    config: str
    name: str
    engine: str
    mode: str
    processes: list[str]
    not_installed_reason: str | None

    @property
    def installed(self) -> bool:
        return self.not_installed_reason is None

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "name": self.name, "engine": self.engine, "mode": self.mode,
                "processes": self.processes, "installed": self.installed, "not_installed_reason": self.not_installed_reason}


def check_session_flags(port: int | None, hold_s: float) -> None:
    """--port and --hold-s, refused with the fix before anything is loaded or started."""
    if port is not None and not (1 <= port <= 65535):
        raise HarnessError(f"--port must be between 1 and 65535, got {port}.")
    if not math.isfinite(hold_s) or hold_s < 0:
        raise HarnessError(f"--hold-s must be a finite number of seconds >= 0, got {hold_s!r}; use --serve to serve until interrupted.")


def check_engine(cfg: EngineConfig, port: int | None = None) -> EngineCheck:
    plan = make_plan(cfg, resolve=False, port=port)
    missing = " ".join(plan.engine_info.get("not_exact") or []) or None  # llama.cpp: its binary or model not installed
    return EngineCheck(cfg.source, cfg.name, cfg.engine, cfg.base.mode, [p.role for p in plan.processes], missing)


def dry_run_plan(cfg: EngineConfig, port: int | None = None) -> LaunchPlan:
    """The exact commands (with their environment), nothing started."""
    return make_plan(cfg, resolve=False, port=port)


def dry_run_dict(cfg: EngineConfig, plan: LaunchPlan) -> dict[str, Any]:
    return {"config": cfg.name, "engine": cfg.engine, "mode": plan.mode, "endpoint": plan.endpoint,
            "served_name": plan.served_name, "processes": [p.to_dict() for p in plan.processes],
            "not_exact": list(plan.engine_info.get("not_exact") or [])}


@dataclass(frozen=True)
class EngineBenchRequest:
    """What `--bench-pd` runs against the engine once it is ready: one bench-pd per API."""

    scenario: str | Path = DEFAULT_SCENARIO
    duration_s: float = 20.0
    rate_per_s: float | None = None
    apis: Sequence[str] = ("chat", "completions")
    results_dir: str = "results"
    report_dir: str | None = "reports"
    calibration: str | None = None  # a twin.json or a step-time calibration: the twin predicts each run (simulated)
    engine_config: str | None = None  # the launched config's path (set by the CLI): the scheduler the twin runs
    proxy: bool = False
    request_timeout_s: float = 120.0  # a request without its last byte by then is recorded as a timeout


def engine_session(cfg: EngineConfig, *, results_dir: str | None = "results", serve: bool = False, hold_s: float = 0.0,
                   port: int | None = None, log_dir: str | None = None, bench: EngineBenchRequest | None = None,
                   command_line: list[str] | None = None,
                   notify: Callable[[str], None] | None = None) -> tuple[SessionResult, list[BenchCheck]]:
    """Launch, measure, (bench,) hold (`serve`: until interrupted), store, stop; `notify` hears "ready: ..." lines."""
    check_session_flags(port, hold_s)
    benches: list[BenchCheck] = []

    def on_ready(eng: RunningEngine) -> dict[str, Any] | None:
        if notify is not None:
            for line in ready_lines(eng, serve):
                notify(line)
        if bench is None:
            return None
        for api in bench.apis:
            benches.append(bench_pd_against(eng, scenario=bench.scenario, duration_s=bench.duration_s,
                                            rate_per_s=bench.rate_per_s, api=api, results_dir=bench.results_dir,
                                            report_dir=bench.report_dir, calibration=bench.calibration,
                                            engine_config=bench.engine_config or eng.plan.config_name, proxy=bench.proxy,
                                            request_timeout_s=bench.request_timeout_s, threads=getattr(cfg.options, "threads", None)))
        return {"bench_pd": [b.to_dict() for b in benches]}

    res = run_session(cfg, results_dir=results_dir, hold_s=math.inf if serve else hold_s, port=port, log_dir=log_dir,
                      on_ready=on_ready, command_line=command_line)
    return res, benches
