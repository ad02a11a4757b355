"""Sections of the bench-pd report for what a run records beside its requests (issue 49): GPU telemetry on the run's time
axis and per phase, prefix reuse of multi-turn sessions, the engine profile window, and an over-saturation cut.

Each is read from the stored run (workloads.run_extras), so a replayed or imported run renders the
same. Returns report sections — (heading, paragraphs, table rows) as bench_pd's renderer takes them — and figures.
"""

from __future__ import annotations

import base64
import io
from typing import Any

Section = tuple[str, list[str], list[list[str]]]


def _f(v: float | None, scale: float = 1.0, fmt: str = ".0f", unit: str = "") -> str:
    return "—" if v is None else f"{v * scale:{fmt}}{unit}"


def gpu_section(gpu: dict[str, Any]) -> Section:
    ph = gpu.get("phases") or {}
    paras = []
    src = (gpu.get("sampler") or {})
    if src.get("sources"):
        paras.append(f"Sources: {', '.join(src['sources'])}; every {src.get('interval_s', 1):g} s; {gpu.get('samples', 0)} GPU "
                     f"samples. {src.get('nvml') or ''}".strip())
    if ph:
        paras.append(f"Phases (seconds since t0): startup [0, {ph['startup_end_s']:.1f}), steady [{ph['startup_end_s']:.1f}, "
                     f"{ph['steady_end_s']:.1f}), drain [{ph['steady_end_s']:.1f}, {max(ph['end_s'], ph['steady_end_s']):.1f}]; {ph['rule']}.")
    for ep, e in (gpu.get("errors") or {}).items():
        paras.append(f"{ep}: {e['count']} failed reads, the first at {e.get('first_t_s', 0):.1f} s: {e['first']}.")
    if (src or {}).get("error"):
        paras.append(f"Sampler: {src['error']}.")
    table = [["GPU", "source, role", "phase", "samples", "util", "SM clock mean / min (MHz)", "mem clock (MHz)",
              "power mean / max (W)", "memory used max (GiB)", "temp max (C)", "HBM temp max (C)", "throttled"]]
    for r in gpu.get("rows") or []:
        thr = "—" if r["throttled_frac"] is None else f"{r['throttled_frac']:.0%}" + (
            f" ({', '.join(r['throttle_reasons'])})" if r["throttle_reasons"] else "")
        table.append([f"{r['host']}/{r['gpu']}", f"{r['source']}, {r['role']}", r["phase"], str(r["samples"]),
                      _f(r["util_mean_frac"], 100, ".0f", " %"),
                      f"{_f(r['sm_clock_mean_hz'], 1e-6)} / {_f(r['sm_clock_min_hz'], 1e-6)}", _f(r["mem_clock_mean_hz"], 1e-6),
                      f"{_f(r['power_mean_w'])} / {_f(r['power_max_w'])}", _f(r["memory_used_max_bytes"], 2**-30, ".1f"),
                      _f(r["temperature_max_c"]), _f(r["memory_temperature_max_c"]), thr])
    if len(table) == 1:
        paras.append("No GPU sample was taken.")
        table = []
    return "GPU telemetry by phase", paras, table


def reuse_section(reuse: dict[str, Any]) -> Section:
    from workloads.reuse_summary import ReuseSummary, TurnReuse, reuse_lines

    r = ReuseSummary(**{**reuse, "by_turn": [TurnReuse(**t) for t in reuse.get("by_turn") or []]})
    table = [["turn", "requests", "prompt tokens", "history resent (reused prefix)", "cached (engine usage)", "cached ÷ resent"]]
    for t in r.by_turn:
        share = "—" if t.cached_tokens is None or not t.reused_prefix_tokens else f"{t.cached_tokens / t.reused_prefix_tokens:.0%}"
        table.append([str(t.turn), str(t.requests), str(t.prompt_tokens), str(t.reused_prefix_tokens),
                      "not reported" if t.cached_tokens is None else str(t.cached_tokens), share])
    paras = reuse_lines(r) + ["Reused prefix: the history a later turn resends (live replies: the previous prompt and the "
                              "reply the server streamed; synthetic: the previous prompt only); cached: the engine's "
                              "usage.prompt_tokens_details.cached_tokens (Chapter 9 §9.5)."]
    return "Multi-turn prefix reuse", paras, table


def profile_section(p: dict[str, Any]) -> Section:
    span = p.get("span_s")
    paras = [f"Window asked for: {p['window_in_measurement_s'][0]:g}–{p['window_in_measurement_s'][1]:g} s into the measurement "
             f"window = {p['window_s'][0]:g}–{p['window_s'][1]:g} s since t0."
             + (f" The engine profiled from {span[0]:.2f} to {span[1]:.2f} s (start answered → stop sent)." if span else ""),
             f"Trace: {p.get('trace') or 'none'}."]
    if p.get("note"):
        paras.append(f"Note: {p['note']}.")
    table = [["call", "sent (s)", "answered (s)", "HTTP", "answer"]]
    table += [[c["path"], f"{c['sent_s']:.2f}", f"{c['answered_s']:.2f}", str(c["status"] or "none"), c["answer"][:120]]
              for c in p.get("calls") or []]
    return "Engine profile window", paras, table


def early_stop_section(e: dict[str, Any]) -> Section:
    rule = e.get("rule") or {}
    return ("Stopped early: over-saturated",
            [f"The run was cut short at {e['t_s']:.1f} s: {e['reason']}.",
             f"Rule (workloads/oversaturation.py): over the last {rule.get('window_s', 30):g} s, once {rule.get('min_elapsed_s', 20):g} s "
             f"have passed, both the in-flight count and TTFT from the intended send grow with 95 % lower confidence bounds "
             f"above {rule.get('min_growth_frac', 0.1):g} × the offered rate and {rule.get('min_ttft_growth', 0.05):g} s/s. "
             "Requests not yet sent are recorded as not_sent; the figures cover what was measured until then."], [])


def gpu_figure(run: Any, gpu: dict[str, Any]) -> str | None:
    """Utilisation, SM clock, power and memory used per GPU on the run's time axis, with the phase boundaries."""
    if "gpu_metrics" not in run.tables():
        return None
    df = run.table("gpu_metrics")
    ok = df[df["error"].isna()]
    if not len(ok):
        return None
    ph = gpu.get("phases") or {}
    png = gpu_panels(ok, marks=[x for x in (ph.get("startup_end_s"), ph.get("steady_end_s")) if x is not None],
                     xlabel="time since t0 (s); dotted: steady phase from / to", title="GPU telemetry during the run")
    return base64.b64encode(png).decode()


def gpu_panels(ok: Any, *, marks: Any = (), spans: Any = (), xlabel: str, title: str) -> bytes:
    """Four panels (utilisation, SM clock, power, memory used) per GPU of a gpu_metrics table's good rows against t_s,
    with dotted lines at `marks` and shaded (start, end, label) `spans`; PNG bytes. Shared with the loop report."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(13, 8), sharex=True)
    for i, ((src, role, host, g), d) in enumerate(ok.groupby(["source", "role", "host", "gpu"], dropna=False, sort=True)):
        # one line per sampled stretch (a loop's load runs are separate): no line drawn across the gaps between them
        for k, (_run, r) in enumerate(d.groupby("load_run", sort=False) if "load_run" in d else [(None, d)]):
            r = r.sort_values("t_s")
            kw = {"lw": 1, "color": f"C{i % 10}"}
            axes[0].plot(r["t_s"], r["util_frac"].astype(float) * 100, label=None if k else f"{host}/{g} ({src}, {role})", **kw)
            axes[1].plot(r["t_s"], r["sm_clock_hz"].astype(float) / 1e6, **kw)
            axes[2].plot(r["t_s"], r["power_w"].astype(float), **kw)
            axes[3].plot(r["t_s"], r["memory_used_bytes"].astype(float) / 2**30, **kw)
    for ax, ylab in zip(axes, ("util (%)", "SM clock (MHz)", "power (W)", "memory used (GiB)")):
        ax.set_ylabel(ylab)
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
        for x in marks:
            ax.axvline(x, color="0.4", ls=":", lw=1)
        for i, (a, b, _lab) in enumerate(spans):
            ax.axvspan(a, b, color="0.85" if i % 2 else "0.92", lw=0)
    for a, b, lab in spans:
        axes[0].annotate(lab, ((a + b) / 2, 1.0), xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=7)
    axes[0].legend(fontsize=7, ncol=2)
    axes[-1].set_xlabel(xlabel)
    fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def extras_sections(run: Any, requests: Any) -> tuple[list[Section], list[tuple[str, str]]]:
    """The sections and figures (caption, base64 PNG) this run has material for; ([], []) for a run without any."""
    from workloads.run_extras import run_extras

    x = run_extras(run, requests)
    sections: list[Section] = []
    figs: list[tuple[str, str]] = []
    if x.trace:
        from workloads.run_extras import extra_lines

        sections.append(("Trace replayed", [ln.removeprefix("trace: ") for ln in extra_lines(x) if ln.startswith("trace: ")]
                         + ["Window in the trace's own seconds from its first request, then the gaps × the time scale, then "
                            "a uniform slow-down to the rate cap when the selection ran faster (docs/loadgen.md, Traces)."], []))
    if x.early_stop:
        sections.append(early_stop_section(x.early_stop))
    if x.gpu is not None:
        sections.append(gpu_section(x.gpu))
        png = gpu_figure(run, x.gpu)
        if png:
            figs.append(("GPU telemetry (utilisation, SM clock, power, memory used) on the run's time axis", png))
    if x.reuse is not None:
        sections.append(reuse_section(x.reuse))
    if x.profile is not None:
        sections.append(profile_section(x.profile))
    return sections, figs
