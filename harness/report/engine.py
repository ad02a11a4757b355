"""Text output of `harness engine`: the --check line, the --dry-run commands, the ready line, the session summary
(time-to-ready, metrics, stop codes) and each bench-pd's client-vs-engine cross-check."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from harness.engines.crosscheck import CrossRow, render_rows
from harness.engines.launcher import LaunchPlan, RunningEngine
from harness.engines.session import SessionResult
from workloads.summary import LoadSummary


class EngineCheck(Protocol):
    """What the --check line reads of harness.bench.engine.EngineCheck (the use case's record; a report never imports
    the use-case layer above it)."""

    name: str
    engine: str
    mode: str
    processes: list[str]
    not_installed_reason: str | None


class BenchCheck(Protocol):
    """What the session summary reads of harness.bench.engine.BenchCheck."""

    api: str
    run_dir: str
    summary: LoadSummary
    rows: list[CrossRow]
    prediction: dict[str, Any] | None


def render_check(c: EngineCheck) -> str:
    lines = [f"ok: {c.name} ({c.engine}, mode {c.mode}): {len(c.processes)} process(es): {', '.join(c.processes)}"]
    if c.not_installed_reason:
        lines.append(f"note: {c.not_installed_reason}")
    return "\n".join(lines)


def render_dry_run(plan: LaunchPlan) -> str:
    lines = [f"# {plan.config_name}: {plan.engine}, mode {plan.mode}, endpoint {plan.endpoint} (model {plan.served_name})"]
    for why in plan.engine_info.get("not_exact") or []:
        lines.append(f"# NOT EXACT YET: {why}")
    for p in plan.processes:
        lines.append(f"# {p.role}: health {p.base_url}{p.health_path}" + (f", metrics {p.base_url}{p.metrics_path}" if p.metrics_path else ""))
        lines.append(p.shell())
    return "\n".join(lines)


def ready_lines(eng: RunningEngine, serving: bool) -> list[str]:
    t = eng.time_to_ready
    out = [f"ready: {eng.plan.endpoint} (model {eng.plan.served_name}) in {t.ready_s:.3f} s"]
    if serving:
        out.append("serving; Ctrl-C stops it")
    return out


def render_session(res: SessionResult, benches: Sequence[BenchCheck]) -> str:
    t = res.time_to_ready
    e: dict[str, Any] = res.engine
    rel = f", release {e['release']}" if e.get("release") else ""
    lines = [f"engine      {e.get('name')} version {e.get('version')} ({e.get('commit') or 'commit unknown'}{rel})",
             f"endpoint    {res.endpoint}  model {e.get('served_name')}",
             f"healthy     {t.healthy_s:8.3f} s after spawn",
             f"first reply {t.first_request_s:8.3f} s after spawn (time-to-ready; the request took {t.probe_latency_s:.3f} s)"]
    lines += [f"metrics     {role}: {n} samples" for role, n in res.metrics.items()]
    lines += [f"note        {n}" for n in res.notes]
    lines.append(f"stopped     {', '.join(f'{r}: exit {c}' for r, c in res.stop_codes.items())}")
    if res.run_dir:
        lines.append(f"stored      {res.run_dir}")
    if benches:
        # the bench-pd report module (numpy, the model) adds 0.45 s to `harness engine --check`, which has no bench
        from harness.report.bench_pd import twin_lines  # noqa: PLC0415

        for bc in benches:
            s = bc.summary
            lines += [f"\nbench-pd ({bc.api}): {bc.run_dir}",
                      f"  {s.requests_ok} ok of {s.requests_total}, {s.output_tokens_per_s:.1f} output tokens/s",
                      *("  " + ln for ln in twin_lines(bc.prediction, s)),
                      "  client vs engine (llama.cpp /metrics deltas over the run):"]
            lines += ["  " + ln for ln in render_rows(bc.rows).splitlines()]
    return "\n".join(lines)
