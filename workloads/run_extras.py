"""What a load run recorded beside its requests, read back from the run directory: GPU telemetry per phase and per GPU,
prefix reuse of multi-turn sessions, the engine profile window, and an over-saturation cut.

One reader for the console (bench-pd), the report (harness.report.load_extras) and a replay, so all show the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RunExtras:
    gpu: dict[str, Any] | None  # workloads.gpu_summary.GpuTelemetrySummary as a dict, with the sampler's report
    reuse: dict[str, Any] | None  # workloads.reuse_summary.ReuseSummary as a dict
    profile: dict[str, Any] | None  # profile.json
    early_stop: dict[str, Any] | None  # the manifest's early_stop
    trace: dict[str, Any] | None = None  # a replayed trace's selection (workloads.traces), from the artifact's metadata

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_extras(run: Any, requests: Any | None = None) -> RunExtras:
    """The run's GPU telemetry per phase, prefix reuse, profile window and early stop, from its stored files."""
    from workloads.gpu_summary import summarise_gpu
    from workloads.phases import load_phases
    from workloads.reuse_summary import summarise_reuse
    from workloads.summary import span_of

    tables = run.tables()
    req = requests if requests is not None else (run.table("requests") if "requests" in tables else None)
    gpu = None
    report = _json(run, "gpu_telemetry.json")
    if "gpu_metrics" in tables or report:
        phases = load_phases(req, span_of(run)) if req is not None and len(req) else None
        if "gpu_metrics" in tables and phases is not None:
            gpu = {**summarise_gpu(run.table("gpu_metrics"), phases).to_dict(), "sampler": report}
        else:
            gpu = {"phases": phases.to_dict() if phases else None, "rows": [], "errors": (report or {}).get("errors") or {},
                   "samples": 0, "sampler": report}
    wl = run.manifest.extra.get("workload") or {}
    reuse = summarise_reuse(req, wl.get("replies")) if req is not None else None
    trace = {k: wl.get(k) for k in TRACE_KEYS} if wl.get("trace_format") else None
    return RunExtras(gpu, reuse.to_dict() if reuse else None, _json(run, "profile.json"), run.manifest.extra.get("early_stop"), trace)


TRACE_KEYS = ("trace", "trace_format", "trace_rows_read", "trace_requests", "trace_window_s", "time_scale", "effective_time_scale",
              "trace_max_rate_per_s", "rate_capped", "replay_mean_rate_per_s", "trace_notes")


def _json(run: Any, name: str) -> dict[str, Any] | None:
    try:
        return run.json(name)
    except FileNotFoundError:
        return None


def extra_lines(x: RunExtras) -> list[str]:
    """Console lines for bench-pd (after its headline)."""
    from workloads.gpu_summary import GpuPhaseRow, GpuTelemetrySummary, summary_lines
    from workloads.reuse_summary import ReuseSummary, TurnReuse, reuse_lines

    out: list[str] = []
    if x.trace:
        t = x.trace
        w = t.get("trace_window_s") or [0, None]
        rate = t.get("replay_mean_rate_per_s")
        out.append(f"trace: {t['trace_format']} {t['trace']}: {t['trace_requests']} requests of {t['trace_rows_read']} rows read, "
                   f"window {w[0]:g}–{'end' if w[1] is None else f'{w[1]:g}'} s, time scale {t['time_scale']:g}"
                   + (f", slowed to {t['effective_time_scale']:.3g} by the rate cap {t['trace_max_rate_per_s']:g} req/s"
                      if t.get("rate_capped") else "")
                   + (f"; replay mean rate {rate:.3g} req/s" if rate else "")
                   + "".join(f"; {n}" for n in t.get("trace_notes") or []))
    if x.early_stop:
        out.append(f"stopped early at {x.early_stop['t_s']:.1f} s: over-saturated: {x.early_stop['reason']}")
    if x.gpu is not None:
        s = GpuTelemetrySummary(x.gpu.get("phases") or {}, [GpuPhaseRow(**r) for r in x.gpu.get("rows") or []],
                                x.gpu.get("errors") or {}, int(x.gpu.get("samples") or 0))
        out += [ln for ln in summary_lines(s) if " steady:" in ln or ln.startswith("GPU telemetry from")]
        nvml = (x.gpu.get("sampler") or {}).get("nvml") or ""
        if not s.rows and not s.errors:
            out.append(f"GPU telemetry: no sample ({nvml or 'no source gave one'})")
    if x.reuse is not None:
        r = dict(x.reuse)
        r["by_turn"] = [TurnReuse(**t) for t in r.get("by_turn") or []]
        out += reuse_lines(ReuseSummary(**r))
    if x.profile is not None:
        span = x.profile.get("span_s")
        out.append(f"profile: window {x.profile['window_s'][0]:g}–{x.profile['window_s'][1]:g} s since t0"
                   + (f", engine profiling from {span[0]:.2f} to {span[1]:.2f} s" if span else "")
                   + (f"; trace: {x.profile['trace']}" if x.profile.get("trace") else "")
                   + (f"; {x.profile['note']}" if x.profile.get("note") else ""))
    return out
