"""One engine session: launch from a config, measure time-to-ready, scrape /metrics, store the run, stop.

Stored under results/<machine>/<run_id>/ (kind "engine"): the manifest's `engine` dict (name,
version, build, binary, command lines, flags), table `engine_startup` (one row of
time-to-ready figures), table `engine_metrics` (every Prometheus sample, scraped right after
the first request and again before stopping) and `engine_logs.json` (the tail of each process's log).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.engines import metrics as prom
from harness.engines.config import EngineConfig, engine_module
from harness.engines.launcher import LaunchPlan, RunningEngine, TimeToReady
from harness.errors import HarnessError
from harness.records import new_manifest
from harness.store import RunWriter


@dataclass(frozen=True)
class SessionResult:
    config: str
    endpoint: str
    run_dir: str | None
    engine: dict[str, Any]  # the manifest's engine dict
    time_to_ready: TimeToReady
    metrics: dict[str, int]  # role -> samples scraped (last scrape)
    stop_codes: dict[str, int | None]
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # what on_ready returned (e.g. a workload's cross-check)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "endpoint": self.endpoint, "run_dir": self.run_dir, "engine": self.engine,
            "time_to_ready": self.time_to_ready.to_dict(), "metrics": self.metrics,
            "stop_codes": self.stop_codes, "notes": self.notes, "extra": self.extra,
        }


def terminate_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM (and SIGHUP) end a session like Ctrl-C, so the engine is stopped on the way out.

    A background job started by a non-interactive shell ignores SIGINT, and an engine runs in its own
    process group: without this, `kill <harness pid>` would leave the engine serving. Returns the
    function restoring the previous handlers (a no-op off the main thread, where handlers cannot be set).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    return lambda: [signal.signal(sig, h) for sig, h in old.items()] and None


def make_plan(cfg: EngineConfig, *, resolve: bool = True, port: int | None = None) -> LaunchPlan:
    return engine_module(cfg.engine).plan(cfg, resolve=resolve, port=port)


def startup_row(plan: LaunchPlan, ttr: TimeToReady) -> dict[str, Any]:
    usage = ttr.probe_response.get("usage") or {}
    return {
        "config": plan.config_name, "engine": plan.engine, "mode": plan.mode,
        "engine_version": str(plan.engine_info.get("version")),
        "healthy_s": ttr.healthy_s, "first_request_s": ttr.first_request_s, "ready_s": ttr.ready_s,
        "healthy_to_first_request_s": ttr.healthy_to_first_request_s, "probe_latency_s": ttr.probe_latency_s,
        "probe_prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "probe_completion_tokens": int(usage.get("completion_tokens") or 0),
    }


def _scrape_all(eng: RunningEngine, phase: str, writer: Any, counts: dict[str, int], notes: list[str]) -> None:
    for spec in eng.plan.processes:
        if not spec.metrics_path:
            continue
        try:
            s = prom.scrape(spec.base_url, spec.metrics_path)
        except HarnessError as exc:
            notes.append(f"metrics of {spec.role} at {phase}: {exc}")
            continue
        counts[spec.role] = len(s.samples)
        if writer is not None:
            rows = [{**r, "role": spec.role} for r in s.rows(phase)]
            writer.append("engine_metrics", rows)


def run_session(
    cfg: EngineConfig,
    *,
    results_dir: str | Path | None = "results",
    hold_s: float = 0.0,
    port: int | None = None,
    log_dir: str | Path | None = None,
    on_ready: Callable[[RunningEngine], dict[str, Any] | None] | None = None,
    command_line: list[str] | None = None,
) -> SessionResult:
    """Launch, measure time-to-ready, scrape metrics, call `on_ready` (e.g. run a workload), hold, store, stop.

    What `on_ready` returns (a JSON-able dict) is stored as session_extra.json and returned in `extra`.

    hold_s: seconds to keep serving after the measurement (math.inf: until interrupted).
    results_dir=None measures without storing.
    """
    if hold_s < 0:
        raise HarnessError(f"--hold-s must be >= 0 seconds, got {hold_s!r}.")
    plan = make_plan(cfg, resolve=True, port=port)
    notes: list[str] = []
    counts: dict[str, int] = {}
    extra: dict[str, Any] = {}
    writer = None
    if results_dir is not None:
        manifest = new_manifest("engine", engine=plan.manifest_engine(), command_line=command_line,
                                extra={"engine_config": cfg.to_dict()})
        writer = RunWriter(manifest, results_dir)
    eng = RunningEngine(plan, log_dir=log_dir)
    stop_codes: dict[str, int | None] = {}
    restore = terminate_as_interrupt()
    try:
        try:
            ttr = eng.start()
            if writer is not None:
                writer.append("engine_startup", [startup_row(plan, ttr)])
            _scrape_all(eng, "after_first_request", writer, counts, notes)
            try:
                if on_ready is not None:
                    extra = on_ready(eng) or {}
                    if extra and writer is not None:
                        writer.write_json("session_extra.json", extra)
                end = time.monotonic() + hold_s
                while time.monotonic() < end:
                    time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            except KeyboardInterrupt:
                # the normal way to end a held (serving) session, also when it lands while on_ready prints "serving"
                if hold_s <= 0:
                    raise
                notes.append(f"stopped by an interrupt after serving {eng.elapsed_s():.1f} s")
            _scrape_all(eng, "before_stop", writer, counts, notes)
        finally:
            logs = {spec.role: eng.log_tail(spec.role, 20000) for spec, _, _ in eng.procs}
            stop_codes = eng.stop()
            if writer is not None:
                writer.write_json("engine_logs.json", {"log_dir": str(eng.log_dir), "tails": logs, "stop_codes": stop_codes})
    except BaseException as exc:
        if writer is not None:
            writer.__exit__(type(exc), exc, None)
        raise
    finally:
        restore()
    if writer is not None:
        writer.update_manifest(notes=[*writer.manifest.notes, *notes])
        writer.__exit__(None, None, None)
    return SessionResult(
        config=cfg.name, endpoint=plan.endpoint, run_dir=str(writer.path) if writer is not None else None,
        engine=plan.manifest_engine(), time_to_ready=ttr, metrics=counts, stop_codes=stop_codes, notes=notes, extra=extra,
    )
