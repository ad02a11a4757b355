"""The loop report (runs of kind loop-cpu and loop-gpu): the twin's served predictions (simulated) against the engine,
both verdicts, the isolated stages against the Chapter 9 roofline, and the diagnostics, one line each.

`loop_page(report)` builds the page from a stored harness.loop_records.report.LoopReport; `render` (the registry
entry, `harness report RUN`) writes it as index.html (figures embedded) and summary.md; `render_text` is the same
page as Markdown without figures (what `harness loop cpu` prints). Reads stored results only.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.loop_records.report import LoopPoint, LoopReport, read_loop_report
from harness.loop_records.verdict import AbsoluteVerdict, repeat_difference
from harness.outdir import writable_dir
from harness.report.figures import _fig, _log, _png
from harness.report.load_extras import gpu_panels, gpu_section
from harness.report.page import Figure, Page, Section, Table
from harness.report.renderer import ReportOptions, RunSource
from harness.served import MetricComparison, ServedComparison, fmt_error_pct
from harness.store import Run
from harness.units import fmt_ms, fmt_num

RUN_KINDS = ("loop-cpu", "loop-gpu")
# the loop's GPU telemetry per served point, repeat and phase (harness.loop.gpu_telemetry writes it)
LOOP_GPU_FILE = "loop_gpu_telemetry.json"


@dataclass(frozen=True)
class LoopGpu:
    """A loop run's GPU telemetry as stored: the summary document and the gpu_metrics table (None: no sample)."""

    doc: dict[str, Any]
    table: Any = None


def read_loop_gpu(run: Run) -> LoopGpu | None:
    """The loop run's GPU telemetry; None for a run without it (measured before it existed, or failed before its points)."""
    try:
        doc = run.json(LOOP_GPU_FILE)
    except FileNotFoundError:
        return None
    return LoopGpu(doc, run.table("gpu_metrics") if "gpu_metrics" in run.tables() else None)


def render(source: RunSource, out_dir: str | Path, options: ReportOptions | None = None) -> list[Path]:
    """Write index.html, summary.md and figures/ for one loop run (no option is used)."""
    if isinstance(source, (list, tuple)):
        if len(source) != 1:
            raise HarnessError("the loop report takes exactly one run; give its run directory.")
        source = source[0]
    run = source if isinstance(source, Run) else Run(source)
    if run.manifest.kind not in RUN_KINDS:
        raise HarnessError(f"{run.path} is a {run.manifest.kind!r} run, not a loop run ({', '.join(RUN_KINDS)}); "
                           "`harness report` picks the renderer for it without --renderer.")
    out = writable_dir(out_dir, "--to", "report directory")
    return loop_page(read_loop_report(run), figures=True, telemetry=read_loop_gpu(run)).write(out)


def render_text(rep: LoopReport) -> str:
    """The report as Markdown, without figures (what the loop prints when it ends)."""
    telemetry = read_loop_gpu(Run(rep.run_dir)) if rep.run_dir and (Path(rep.run_dir) / LOOP_GPU_FILE).is_file() else None
    return loop_page(rep, figures=False, telemetry=telemetry).markdown()


def loop_page(r: LoopReport, *, figures: bool = True, telemetry: LoopGpu | None = None) -> Page:
    gpu = r.kind == "loop-gpu"
    name = r.model.get("name") or Path(str(r.model.get("gguf", "?"))).name
    page = Page(f"Closed loop: {name} on {r.engine.get('name', '?')}",
                f"{r.kind}, status {r.status}; every predicted figure is the digital twin's (SIMULATED), every measured one "
                "the load generator's against the engine.")
    head = page.section("Run")
    if r.status != "complete":
        head.items.append(f"Run {r.status}: {r.error}. What was measured before that is below; the partial run is kept.")
    head.items += _header(r, gpu)
    _verdict(page.section("Verdict"), r)
    if r.points:
        _served(page.section("Served load: the digital twin (simulated) against the engine under the load generator"), r, figures)
    if telemetry is not None:
        _gpu(page.section("GPU telemetry during the served points"), telemetry, figures)
    if len(r.stage_windows) >= 2:
        _windows(page.section("Stage windows: the isolated stages measured again between the served points"), r)
    if r.served_steps:
        _steps(page.section("Served steps: the engine's iterations reconstructed from the streams, against the twin's (diagnostic)"), r)
    if r.constants is not None or r.stage_comparisons:
        _stages(page.section("Isolated stages (Chapter 9 roofline)"), r)
    if r.notes or r.run_dir:
        notes = page.section("Notes")
        notes.items += list(r.notes)
        if r.run_dir:
            notes.items.append(f"Stored: {r.run_dir}")
    return page


# ---------------------------------------------------------------- formatting

def _v(metric: str, v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if metric.endswith("_per_s"):
        return f"{v:.3f}/s"
    return f"{v * 1e3:.0f} ms" if v < 10 else f"{v:.1f} s"


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1e3:.1f} ms"


def _f1(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def _spread(values: Sequence[float | None]) -> float | None:
    """(max − min) / median of one figure's repeats (None below 2)."""
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if len(v) < 2:
        return None
    mid = statistics.median(v)
    return (v[-1] - v[0]) / mid if mid else None


# ---------------------------------------------------------------- sections

def _header(r: LoopReport, gpu: bool) -> list[str]:
    s = r.settings
    wall = (f" The whole loop took {s.loop_wall_s / 60:.1f} min" + _budget(s.time_budget) + "." if s.loop_wall_s else "")
    load = f" Host load average (1 min) {_f1(s.load_average_before)} before, {_f1(s.load_average_after)} after."
    if gpu:
        return [f"Model: {r.model.get('name')}; engine: {r.engine.get('name')} ({s.config}) on {s.gpu}"
                + (f", measured at {s.target_url}" if s.target_url else "") + "." + wall]
    m, e = r.model, r.engine
    reps = (f"{s.stage_reps[0]} repetitions (median) in stage window 1, {s.stage_reps[1]} in later windows"
            if len(set(s.stage_reps)) > 1 else f"{s.stage_reps[0] if s.stage_reps else s.reps} repetitions (median)")
    out = [f"Model: {Path(str(m.get('gguf'))).name} ({m.get('architecture')}, {m.get('file_type')}); streamed weights per "
           f"forward pass {m.get('streamed_weight_bytes', 0) / 2**20:.1f} MiB ({m.get('streamed_weight_bytes_per_param', 0):.3f} "
           "bytes/param).",
           f"Engine: llama.cpp {e.get('version') or '(version unknown)'} (release {e.get('release') or 'unknown'}, commit "
           f"{e.get('commit') or 'unknown'}), {s.threads} thread{'s' if s.threads != 1 else ''}, "
           f"{(e.get('flags') or {}).get('parallel', '?')} slots. Prompt {s.prompt_tokens} tokens; decode: "
           f"{s.decode_prompt_tokens}-token prompts, {s.output_tokens} output tokens; {reps}; each served point measured "
           f"{s.repeats} time{'s' if s.repeats > 1 else ''}." + load + wall]
    return out


def _budget(b: dict[str, Any] | None) -> str:
    if not b:
        return ""
    return f" (budget {b['budget_s'] / 60:.1f} min, planned {b['predicted_s'] / 60:.1f} min)"


def _verdict(sec: Section, r: LoopReport) -> None:
    v = r.verdict
    if v is None:
        sec.items.append("No served point was compared (none measured).")
        return
    sec.items.append(f"Verdict on held-out, uncontended points (capacity ±5 %, TTFT and TPOT p50 ±10 %): {v.text()}; "
                     f"{v.contended_points} of {v.points} points were contended (the engine got < 85 % of its cores while it "
                     "had work) and are excluded.")
    sec.items += [f"Outside target: {f}" for f in v.failures]
    rep = r.repeatability
    none = ("none: each point was measured once (--repeats 1)" if r.settings.repeats < 2 else
            "none: no figure measured twice could be judged (see why above)")
    sec.items.append("Repeatability verdict (the twin's errors against the engine's own repeat-to-repeat differences): "
                     + (rep.text() if rep is not None else none) + "; the test is in docs/loop-cpu.md.")
    if r.first_window_verdict is not None:
        fw = r.first_window_verdict
        sec.items.append(f"Stage windows: with stage window 1 alone (how the points were planned) {_count(fw)}, against "
                         f"{_count(v)} with every window's median.")
    steps = _steps_line(r)
    if steps:
        sec.items.append(steps)


def _count(v: AbsoluteVerdict) -> str:
    return f"{v.within} of {v.judged} judged figures within target" if v.judged else "nothing judged"


def _twin_line(r: LoopReport) -> str:
    t = r.twin or {}
    st = t.get("settings") or {}
    if t.get("engine") not in (None, "llama.cpp"):
        return (f"Twin: {t.get('engine')} scheduler, up to {st.get('max_num_seqs')} running requests, "
                f"{st.get('max_num_batched_tokens')} tokens a step, prefill and decode {'mixed' if st.get('mixed') else 'in separate steps'}, "
                f"prefix caching {'on' if st.get('prefix_caching') else 'off'}; step times: {t.get('source')}."
                + "".join(f" Assumed: {a}." for a in st.get("assumptions", [])))
    return (f"Twin: llama-server scheduler with {st.get('slots')} slots, slot context {st.get('n_ctx_slot', '—')}, "
            f"-b {st.get('batch_size')} / -ub {st.get('ubatch_size')}, continuous batching {'on' if st.get('cont_batching') else 'off'}, "
            f"unified KV {'on' if st.get('kv_unified') else 'off'}, SWA checkpoints {'on' if st.get('swa_checkpoints') else 'off'}; "
            f"step times: {t.get('source')}.")


def _served(sec: Section, r: LoopReport, figures: bool) -> None:
    if r.twin:
        sec.items.append(_twin_line(r))
    if r.capacity:
        how = ("output tokens/s between the 20th and 80th percentile completion of the capacity burst the loop sends, over "
               "the mean output" if any(c.burst_requests for c in r.capacity.values()) else "a long simulated backlog")
        sec.items.append(f"Predicted capacity (throughput at saturation, simulated; {how}): " + "; ".join(
            f"{mix}: {c.requests_per_s:.3f} req/s = {c.output_tokens_per_s:.1f} output tokens/s" for mix, c in r.capacity.items()))
    by = {p.point.index: p for p in r.points}
    rows = []
    for c in r.comparisons:
        p = by.get(c.point.index)
        for x in c.rows:
            rows.append(_row(c, x, p))
    sec.items.append(Table(["mix", "load", "× capacity", "n", "metric", "predicted", "measured", "error", "target",
                            "measured median, 95 % interval", "repeats (spread)", "engine CPU share"], rows,
                           "error = (predicted − measured) / measured; measured is the repeats' median; the interval is a "
                           "bootstrap over the requests of every repeat."))
    notes = {}
    for c in r.comparisons:
        for x in c.rows:
            if x.note and x.target is not None:
                notes.setdefault((c.point.workload, c.point.load_text()), x.note)
    sec.items += [f"{mix} @ {load}: {n}" for (mix, load), n in notes.items()]
    if figures and r.comparisons:
        png = _scatter(r.comparisons)
        if png:
            sec.items.append(Figure("predicted-vs-measured", "Twin (simulated) against the engine",
                                    png, "Each judged figure: the twin's prediction against the repeats' median, with the "
                                    "measured median's 95 % interval; the band is the ±10 % target."))
        png = _repeat_plot(r.comparisons)
        if png:
            sec.items.append(Figure("repeatability", "The twin's error against the engine's own repeatability", png,
                                    "Per judged figure measured twice or more: |twin error| against what one more repeat is "
                                    "expected to miss the repeats' median by (docs/loop-cpu.md); below the diagonal the twin "
                                    "is closer than the engine to itself."))


def _gpu(sec: Section, g: LoopGpu, figures: bool) -> None:
    """Per served point, repeat, GPU and phase (the load run's phases), the failing endpoints, and the samples on the
    loop's time axis with each load run shaded."""
    d, runs = g.doc, g.doc.get("runs") or []
    if not d.get("sources"):
        sec.items.append(f"No GPU telemetry: {d.get('why_none') or d.get('nvml')}. Nothing was sampled.")
        return
    n = sum(int((x.get("gpu") or {}).get("samples") or 0) for x in runs)
    sec.items.append(f"Sources: {', '.join(d['sources'])}; every {d.get('interval_s', 1):g} s; {n} GPU samples over "
                     f"{len(runs)} load run{'s' if len(runs) != 1 else ''}. This host: {d.get('nvml')}.")
    head, rows, errors = None, [], {}
    for x in runs:
        _, _, table = gpu_section(x.get("gpu") or {})
        if table:
            head = table[0]
            rows += [[x["mix"], x["load"], str(x["repeat"] + 1), *row] for row in table[1:]]
        for ep, e in ((x.get("gpu") or {}).get("errors") or {}).items():
            agg = errors.setdefault(ep, {"count": 0, "runs": 0, "first": e["first"]})
            agg["count"] += int(e["count"])
            agg["runs"] += 1
    if head is not None:
        sec.items.append(Table(["mix", "load", "repeat", *head], rows,
                               "Phases of each load run (workloads/phases.py): startup until completions keep up with sends, "
                               "steady to the schedule's end, drain to the last request's end."))
    else:
        sec.items.append("No GPU sample was taken during the served points.")
    sec.items += [f"{ep}: {e['count']} failed reads over {e['runs']} load run{'s' if e['runs'] != 1 else ''}; the first: {e['first']}."
                  for ep, e in errors.items()]
    sec.items += [f"{x['mix']} {x['load']}, repeat {x['repeat'] + 1}: {x['error']}." for x in runs if x.get("error")]
    df = g.table
    ok = df[df["error"].isna()] if df is not None else None
    if figures and ok is not None and len(ok):
        spans = [(x["start_s"], x["end_s"], f"{x['mix']} {x['load']}" + (f" #{x['repeat'] + 1}" if x["repeat"] else ""))
                 for x in runs if x.get("end_s") is not None]
        sec.items.append(Figure("gpu-telemetry", "GPU telemetry during the served points",
                                gpu_panels(ok, spans=spans, xlabel="time since the loop started (s); shaded: each served "
                                           "point's load run", title="GPU telemetry during the loop"),
                                "Utilisation, SM clock, power and memory used per GPU; each load run shaded and labelled "
                                "with its mix and load."))


def _row(c: ServedComparison, x: MetricComparison, p: LoopPoint | None) -> list[str]:
    burst = c.point.burst
    share = None if p is None else p.engine_cpu_share
    tgt = "—" if x.target is None else f"±{x.target:.0%} " + ("✓" if x.within else "✗" if x.within is False else "(not judged)")
    iv = x.measured_interval
    ivs = "—" if iv is None else f"{_v(x.metric, iv.low)} – {_v(x.metric, iv.high)}"
    if iv is not None and x.target is not None and (hw := iv.half_width(x.measured)) is not None and hw > x.target:
        ivs += " (wider than the target)"
    sp = _spread(x.repeat_values)
    reps = "—" if not x.repeat_values else (", ".join(_v(x.metric, v) for v in x.repeat_values)
                                           + ("" if sp is None else f" ({sp:.0%})"))
    return [c.point.workload, "all at once" if burst else f"{c.point.rate_per_s:.3f}/s",
            "∞" if burst else ("—" if p is None else f"{p.fraction:.2f}"), str(p.requests if p else "—"), x.metric,
            _v(x.metric, x.predicted), _v(x.metric, x.measured), fmt_error_pct(x.error), tgt, ivs, reps,
            "—" if share is None else f"{share:.0%}" + (" (contended)" if p is not None and p.contended else "")]


def _scatter(comparisons: Sequence[ServedComparison]) -> bytes | None:
    pts = [(x.metric, x.predicted, x.measured, x.measured_interval, x.within) for c in comparisons for x in c.rows
           if x.judged and x.metric != "capacity_requests_per_s" and x.predicted and x.measured]
    if not pts:
        return None
    fig, ax = _fig(6.0, 4.6)
    for metric, marker in (("ttft_p50_s", "o"), ("tpot_p50_s", "s")):
        sel = [p for p in pts if p[0] == metric]
        if not sel:
            continue
        meas = np.array([p[2] for p in sel]) * 1e3
        pred = np.array([p[1] for p in sel]) * 1e3
        lo = np.array([(p[2] - p[3].low) if p[3] else 0.0 for p in sel]) * 1e3
        hi = np.array([(p[3].high - p[2]) if p[3] else 0.0 for p in sel]) * 1e3
        ax.errorbar(meas, pred, xerr=[lo, hi], fmt=marker, ms=5, capsize=2, label=metric)
    allv = np.array([v for p in pts for v in (p[1], p[2])]) * 1e3
    x = np.geomspace(allv.min() * 0.7, allv.max() * 1.4, 50)
    ax.plot(x, x, "k-", lw=0.8)
    ax.fill_between(x, x * 0.9, x * 1.1, color="0.85", label="±10 %")
    _log(ax)
    ax.set_xlabel("measured (ms, median of the repeats)")
    ax.set_ylabel("twin, simulated (ms)")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return _png(fig)


def _repeat_plot(comparisons: Sequence[ServedComparison]) -> bytes | None:
    pts = [(abs(x.error), d) for c in comparisons for x in c.rows if x.judged and x.error is not None
           and (d := repeat_difference(x.repeat_values)) is not None]
    if not pts:
        return None
    fig, ax = _fig(5.5, 4.4)
    e, d = (np.array(v) * 100 for v in zip(*pts))
    ax.scatter(d, e, s=20)
    top = max(float(e.max()), float(d.max()), 1.0) * 1.1
    ax.plot([0, top], [0, top], "k-", lw=0.8)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("expected miss of one more engine repeat (%)")
    ax.set_ylabel("|twin error| (%)")
    ax.grid(True, alpha=0.3)
    return _png(fig)


def _steps_line(r: LoopReport) -> str:
    """The served steps in one line: per mix, the twin's median step against the engine's at its fullest batch."""
    if not r.served_steps:
        return ""
    parts = []
    for mix in dict.fromkeys(x.mix for x in r.served_steps):
        rows = [x for x in r.served_steps if x.mix == mix and x.engine_n >= 10 and x.median_error is not None]
        if rows:
            x = max(rows, key=lambda x: x.batch)
            parts.append(f"{mix} batch {x.batch} {fmt_error_pct(x.median_error, digits=0)}")
    return ("Served steps (the engine's iterations from the streams, the twin's from its simulation; a diagnostic): twin "
            "against engine, median step at the fullest batch: " + ("; ".join(parts) if parts else "too few iterations") + ".")


def _windows(sec: Section, r: LoopReport) -> None:
    ws = r.stage_windows
    batches = sorted({int(b) for w in ws for b, _ in w.decode_step_s_by_batch})
    mixed = sorted({(int(b), int(n)) for w in ws for b, n, _ in w.mixed_prompt_s})
    cols = (["window", "began", "after served point", "requests", "took", f"{r.settings.prompt_tokens}-token prefill (engine)"]
            + [f"decode step B={b} (client)" for b in batches]
            + [f"{n}-token prompt beside {b} decode{'s' if b > 1 else ''} (engine; over the same alone just before)" for b, n in mixed])
    rows = []
    for w in ws:
        dec, mix, extra = dict(w.decode_step_s_by_batch), {(b, n): v for b, n, v in w.mixed_prompt_s}, {(b, n): v for b, n, v in w.mixed_extra_s}
        rows.append([str(w.index + 1), f"{w.started_s / 60:.1f} min", "— (before them)" if w.after_point is None else str(w.after_point + 1),
                     str(w.requests), f"{w.duration_s:.0f} s", _ms(w.prefill_prompt_s)] + [_ms(dec.get(b)) for b in batches]
                    + [_ms(mix.get(c)) + ("" if extra.get(c) is None else f" ({extra[c] * 1e3:+.0f})") for c in mixed])
    spreads = ([_spread([w.prefill_prompt_s for w in ws])] + [_spread([dict(w.decode_step_s_by_batch).get(b) for w in ws]) for b in batches]
               + [_spread([{(b, n): v for b, n, v in w.mixed_prompt_s}.get(c) for w in ws]) for c in mixed])
    rows.append(["spread (max − min over the median)", "", "", "", ""] + ["—" if x is None else f"{x:.0%}" for x in spreads])
    sec.items.append("Each window corrects the twin on its own; every served point is predicted from the median of all "
                     "windows' corrections (made after the points ran; nothing served enters the corrections).")
    sec.items.append(Table(cols, rows))


def _steps(sec: Section, r: LoopReport) -> None:
    sec.items.append("Tokens of one iteration reach the client together; the gap to the next group is the iteration "
                     "(harness/loop/iterations.py). The twin's simulated tokens for the same requests go through the same "
                     "reconstruction. The median is the plain step at that batch; the mean also carries the prompt chunks "
                     "that rode in an iteration. Nothing here feeds the prediction.")
    sec.items.append(Table(["mix", "batch", "engine iterations", "engine median", "twin median", "error", "engine mean",
                            "twin mean", "error", "time share engine / twin"],
                           [[x.mix, str(x.batch), f"{x.engine_n} (twin {x.twin_n})", _ms(x.engine_median_s), _ms(x.twin_median_s),
                             fmt_error_pct(x.median_error, digits=0), _ms(x.engine_mean_s), _ms(x.twin_mean_s),
                             fmt_error_pct(x.mean_error, digits=0), f"{x.engine_share:.0%} / {x.twin_share:.0%}"]
                            for x in r.served_steps]))


def _fmt_stage(q: str, v: float | None) -> str:
    return fmt_ms(v) if q.endswith("_s") and not q.endswith("_per_s") else fmt_num(v, ".1f")


def _stages(sec: Section, r: LoopReport) -> None:
    c = r.constants
    if c is not None:
        lines = [f"C_mm = {c.matmul_flops_per_s / 1e9:.1f} GFLOP/s (torch fp32 at the model's projections, {c.threads} threads)",
                 f"B_ws = {c.read_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read of {c.working_set_bytes / 2**20:.0f} MiB, the decode working set)"]
        if c.cpu_share is not None:
            lines.append(f"the calibration got {c.cpu_share:.0%} of its {c.threads} cores"
                         + (" (CONTENDED: the constants understate this host)" if c.cpu_share < 0.85 else ""))
        if c.dram_bandwidth_bytes_per_s:
            lines.append(f"B_dram = {c.dram_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read of {(c.dram_buffer_bytes or 0) / 2**20:.0f} MiB, "
                         f"4× the {(c.llc_bytes or 0) / 2**20:.0f} MiB LLC; reference only)")
        sec.items.append("Calibrated constants (microbench timing core, engine stopped): " + "; ".join(lines) + ".")
    if not r.stage_comparisons:
        return
    sec.items.append(Table(["quantity", "predicted", "measured (engine)", "measured (client)", "error", "bound", "compute term",
                            "memory term", "engine CPU share"],
                           [[x.quantity, _fmt_stage(x.quantity, x.predicted), _fmt_stage(x.quantity, x.measured),
                             _fmt_stage(x.quantity, x.measured_client), fmt_error_pct(x.error, digits=0), x.bound,
                             f"{x.compute_s * 1e3:.2f} ms", f"{x.memory_s * 1e3:.2f} ms",
                             ("—" if x.engine_cpu_share is None else f"{x.engine_cpu_share:.0%}") + (" (contended)" if x.contended else "")]
                            for x in r.stage_comparisons]))
    sec.items += [f"Which term is wrong, {x.quantity}: {x.verdict}" for x in r.stage_comparisons]
    pre = [k for k in r.checks if k.phase == "prefill" and k.ttft_minus_engine_prompt_s is not None]
    mism = [k for k in r.checks if k.chunks_minus_usage not in (0, None)]
    with_usage = [k for k in r.checks if k.usage_completion_tokens is not None]
    stopped = sum(1 for k in r.checks if k.stopped)
    lines = []
    if pre:
        d = [k.ttft_minus_engine_prompt_s * 1e3 for k in pre]  # type: ignore[operator]
        lines.append(f"TTFT − engine prompt time: median {statistics.median(d):.1f} ms, range {min(d):.1f}…{max(d):.1f} ms over {len(d)} prefill requests")
    lines.append(f"streamed chunks vs usage.completion_tokens: {len(mism)} of {len(with_usage)} requests with usage differ"
                 + (f" ({', '.join(f'{k.phase}#{k.rep}: {k.chunks_minus_usage:+d}' for k in mism[:6])})" if mism else "")
                 + (f"; {stopped} stopped by the client (the decodes beside a mixed prompt, once it was done) have none" if stopped else ""))
    eu = [k for k in with_usage if k.engine_predicted_tokens is not None and k.usage_completion_tokens != k.engine_predicted_tokens]
    lines.append(f"usage.completion_tokens vs timings.predicted_n: {len(eu)} of {len(with_usage)} requests with usage differ")
    sec.items.append("Client vs engine (every request): " + "; ".join(lines) + ".")


__all__ = ["LOOP_GPU_FILE", "RUN_KINDS", "LoopGpu", "loop_page", "read_loop_gpu", "render", "render_text"]
