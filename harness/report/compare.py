"""Comparison report: per-metric deltas with intervals and verdicts, overlaid CDFs, latency-vs-throughput
curves and a forest plot of the deltas, as index.html (self-contained) and summary.md (figures/ beside it).

Reads stored runs only (through harness.compare), never measures. Units become ms here and only here.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.report.page import Figure, Page, Table
from harness.report.renderer import ReportOptions, RunSource
from harness.units import fmt_ms, fmt_num, fmt_si, is_missing
from harness.units import fmt_pct as units_fmt_pct

RUN_KINDS: tuple[str, ...] = ()  # explicit only: `--renderer compare` (a folder of load runs defaults to bench-pd)

DPI = 80
FAMILY_TITLES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "E2E"}
VERDICT_MARK = {"faster": "faster ✓", "slower": "SLOWER ✗", "no significant change": "no significant change",
                "not enough data": "not enough data"}


def _fig(w: float, h: float, nrows: int = 1, ncols: int = 1):
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(w, h), dpi=DPI, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _scale(ref: float, unit: str) -> tuple[float, str]:
    """One scale for a row: chosen from its largest finite value, so A and B are shown in the same unit."""
    if unit == "s":
        return (1e-3, "ms") if ref < 10 else (1.0, "s")
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ref >= f:
            return f, p + unit
    return 1.0, unit


def fmt_value(x: float, unit: str, ref: float | None = None) -> str:
    """`x` in `unit`, scaled by `ref` (default |x|): pass the row's largest value to keep one unit per row."""
    if is_missing(x):
        return fmt_num(x)
    f, u = _scale(abs(x) if is_missing(ref) else abs(ref), unit)  # type: ignore[arg-type]
    return fmt_num(x / f, ".2f" if unit == "s" else ".4g" if f == 1.0 else ".3g", suffix=f" {u}")


def fmt_pair(a: float, b: float, unit: str) -> tuple[str, str]:
    """A and B of one row in one unit."""
    ref = max((abs(v) for v in (a, b) if not is_missing(v)), default=None)
    return fmt_value(a, unit, ref), fmt_value(b, unit, ref)


def options_table(p: Any) -> Any:
    """How the two runs' options differ (one option per row), or None when they do not."""
    from harness.compare.runs import options_diff

    diff = options_diff(p.baseline.options, p.candidate.options)
    if not diff:
        return None
    return Table(["option", "A", "B"], [[k, _opt(a), _opt(b)] for k, a, b in diff],
                 "Options recorded in each run's manifest that differ; everything not listed was the same.")


def _opt(v: Any) -> str:
    return "—" if v is None else str(v)


def fmt_pct(x: float) -> str:
    return units_fmt_pct(x, 2, missing="—", sign=True)


def _short(run_id: str) -> str:
    return run_id if len(run_id) <= 34 else run_id[:34] + "…"


def cdf_figure(runs: Sequence[Any], families: Sequence[str], titles: dict[str, str], scale: float = 1e3,
               unit: str = "ms") -> bytes:
    """Empirical CDF of each family for every run, overlaid (one panel per family)."""
    n = len(families)
    ncols = 2 if n > 1 else 1
    nrows = math.ceil(n / ncols)
    fig, axes = _fig(5.0 * ncols, 3.4 * nrows, nrows, ncols)
    for k, fam in enumerate(families):
        ax = axes[k // ncols][k % ncols]
        for r in runs:
            x = r.family(fam)
            if x is None or x.size == 0:
                continue
            xs = np.sort(x) * scale
            ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=f"{r.label} ({_short(r.run_id)[:22]})")
        ax.set_xlabel(f"{titles.get(fam, fam)} ({unit})")
        ax.set_ylabel("fraction of requests ≤ x" if fam in FAMILY_TITLES else "fraction of samples ≤ x")
        ax.set_title(titles.get(fam, fam), fontsize=9)
        ax.grid(True, alpha=0.3)
        for q in (0.5, 0.9, 0.99):
            ax.axhline(q, color="grey", lw=0.6, ls=":")
        ax.legend(fontsize=7)
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    return _png(fig)


def curve_points(cmp: Any) -> dict[str, list[tuple[float, dict[str, float]]]]:
    """label -> [(output tokens/s, {metric: value})] over every load run of the comparison, sorted by throughput."""
    from harness.compare.stats import STATISTICS

    out: dict[str, list[tuple[float, dict[str, float]]]] = {}
    for r in cmp.runs:
        if r.kind != "load" or "output_tokens_per_s" not in r.metrics:
            continue
        vals = {}
        for name in ("output_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"):
            m = r.metrics.get(name)
            if m is not None and m.samples.size:
                vals[name] = float(m.spec.value(float(STATISTICS[m.spec.statistic](m.samples[None, :])[0])))
        if "output_tokens_per_s" in vals:
            out.setdefault(r.label, []).append((vals["output_tokens_per_s"], vals))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in out.items()}


def latency_throughput_figure(points: dict[str, list[tuple[float, dict[str, float]]]]) -> bytes:
    """TTFT and TPOT (p50 solid, p99 dashed) against achieved output tokens/s, one line per engine/setting."""
    fig, axes = _fig(10.0, 3.8, 1, 2)
    for ax, fam, title in ((axes[0][0], "ttft", "TTFT"), (axes[0][1], "tpot", "TPOT")):
        for i, (label, pts) in enumerate(points.items()):
            color = f"C{i % 10}"
            x = [p[0] for p in pts]
            for st, ls in (("p50", "-o"), ("p99", "--s")):
                y = [p[1].get(f"{fam}_{st}_s", np.nan) * 1e3 for p in pts]
                ax.plot(x, y, ls, color=color, label=f"{label} {st}")
        ax.set_xlabel("achieved output tokens/s (measurement window)")
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} vs throughput", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _png(fig)


def forest_figure(rows: Sequence[tuple[str, float, float, float, str]], title: str) -> bytes:
    """δ with its interval per metric (rows: label, δ, low, high, verdict); red slower, green faster."""
    h = max(2.5, 0.28 * len(rows) + 1.2)
    fig, axes = _fig(8.0, h)
    ax = axes[0][0]
    y = np.arange(len(rows))[::-1]
    colors = {"slower": "tab:red", "faster": "tab:green"}
    for yi, (label, d, lo, hi, v) in zip(y, rows):
        if not all(math.isfinite(t) for t in (d, lo, hi)):
            continue
        c = colors.get(v, "tab:grey")
        ax.errorbar([d * 100], [yi], xerr=[[max(d - lo, 0) * 100], [max(hi - d, 0) * 100]], fmt="o", color=c, capsize=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels([r[0] for r in rows], fontsize=7)
    ax.set_xlabel("change of the candidate vs the baseline (%), with its bootstrap interval")
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def render_comparison(cmp: Any, out_dir: str | Path, gates: Sequence[Any] = (), max_forest_rows: int = 40) -> list[Path]:
    """Write the comparison report; `gates` are GateOutcomes to list (may be empty)."""
    o = cmp.options
    page = Page(
        "Comparison: " + " vs ".join(dict.fromkeys(r.label for r in cmp.runs)),
        f"{len(cmp.runs)} run(s), {len(cmp.pairs)} comparison(s). Rendered from stored runs only. Intervals: "
        f"{o.confidence:.0%} percentile bootstrap, {o.n_boot} resamples, seed {o.seed}; verdict when the interval excludes 0 "
        f"and |δ| ≥ {o.min_effect:.0%}.",
    )
    s = page.section("Runs")
    s.items.append(Table(["run", "kind", "label", "workload", "scenario", "notes"],
                         [[r.run_id, r.kind, r.label, f"{r.workload_name or '—'} {str(r.workload_hash or '')[:12]}",
                           r.scenario or "—", "; ".join(r.notes) or "—"] for r in cmp.runs],
                         "Within each workload artifact the first run given is the baseline (A)."))
    s.items.append(cmp.method + ". Requests of one load run share queues, so they are not independent; the "
                   "intervals are the usual per-request approximation and are best read together with repeated runs.")
    if gates:
        g = page.section("Gates")
        g.items.append(Table(["gate", "metric", "B vs A", "δ", "interval", "status"],
                             [[x.gate, x.metric, f"{x.candidate_run} vs {x.baseline_run}", fmt_pct(x.delta_rel),
                               f"[{fmt_pct(x.ci_low_rel)}, {fmt_pct(x.ci_high_rel)}]", _gate_status(x)] for x in gates],
                             "A breach needs the estimate past the bound and a significant change (exit code 3); a pass needs the whole "
                             "interval on the good side of the bound; anything else is inconclusive (exit code 4)."))
    for i, p in enumerate(cmp.pairs, 1):
        sec = page.section(f"Comparison {i}: {p.candidate.label} (B) vs {p.baseline.label} (A)")
        sec.items.append(f"A = {p.baseline.run_id}, B = {p.candidate.run_id}. Verdicts: "
                         + ", ".join(f"{k}: {v}" for k, v in sorted(p.counts().items())) + ".")
        ot = options_table(p)
        sec.items.append(ot if ot is not None else "The two runs were made with the same recorded options.")
        if p.forced_reasons:
            sec.items.append("FORCED comparison of different workloads (--force): " + "; ".join(p.forced_reasons) + ".")
        rows = []
        for m in p.metrics:
            d = m.delta
            rows.append([m.metric, *fmt_pair(d.a_value, d.b_value, m.unit), fmt_pct(d.delta_rel),
                         f"[{fmt_pct(d.ci_low_rel)}, {fmt_pct(d.ci_high_rel)}]",
                         "—" if m.rank is None else f"{m.rank.p_value:.3g}", f"{d.n_a} / {d.n_b}",
                         VERDICT_MARK[m.verdict] + (f" ({m.note})" if m.note else "")])
        sec.items.append(Table(["metric", "A", "B", "δ = B/A − 1", "interval", "rank test p", "n A / B", "verdict"], rows,
                               "p: two-sided Mann-Whitney test of the metric's samples (— for rates, which are sums over requests)."))
        if p.only_in_baseline or p.only_in_candidate:
            sec.items.append(f"Only in A: {', '.join(p.only_in_baseline) or 'none'}. Only in B: {', '.join(p.only_in_candidate) or 'none'}.")
        ranked = sorted(p.metrics, key=lambda m: -abs(m.delta.delta_rel) if math.isfinite(m.delta.delta_rel) else 0)
        shown = ranked[:max_forest_rows] if p.baseline.kind == "micro" else list(p.metrics)
        more = f" (the {max_forest_rows} largest of {len(p.metrics)})" if len(shown) < len(p.metrics) else ""
        sec.items.append(Figure(f"forest-{i}", f"Changes, B vs A{more}",
                                forest_figure([(m.metric, m.delta.delta_rel, m.delta.ci_low_rel, m.delta.ci_high_rel, m.verdict)
                                               for m in shown], f"{p.candidate.label} vs {p.baseline.label}"),
                                "Points are δ, bars the bootstrap interval; red: slower, green: faster, grey: no significant change."))
    load_runs = [r for r in cmp.runs if r.kind == "load"]
    if load_runs:
        d = page.section("Distributions")
        d.items.append(Figure("cdfs", "Latency distributions (empirical CDFs, overlaid)",
                              cdf_figure(load_runs, list(FAMILY_TITLES), FAMILY_TITLES),
                              "Requests measured in each run's window; ITL pools every gap between content events."))
        pts = curve_points(cmp)
        d.items.append(Figure("latency-vs-throughput", "Latency vs throughput",
                              latency_throughput_figure(pts),
                              "One line per engine or setting across its runs (one point per run; a rate sweep draws a curve)."))
    else:
        micro = [r for r in cmp.runs if r.kind == "micro"]
        if cmp.pairs:
            top = sorted(cmp.pairs[0].metrics, key=lambda m: -abs(m.delta.delta_rel) if math.isfinite(m.delta.delta_rel) else 0)
            fams = list(dict.fromkeys(m.family for m in top))[:4]
            if fams:
                d = page.section("Distributions")
                d.items.append(Figure("cdfs", "Raw-sample distributions of the most changed cases (empirical CDFs)",
                                      cdf_figure(micro, fams, {f: f for f in fams}, 1e6, "µs"),
                                      "Each sample is one timed call (divided by its inner repetitions)."))
    return page.write(out_dir)


def render(runs: RunSource, out_dir: str | Path, options: ReportOptions | None = None) -> list[Path]:
    """RENDERERS entry: `runs` is a list of run directories (baseline first within each workload), or one
    directory holding several runs (`harness report results/<machine>/ --renderer compare`: oldest first).
    No report option is used (the comparison's own options are `harness compare`'s)."""
    from harness.compare.compare import compare_runs
    from harness.store import iter_runs

    if isinstance(runs, (str, Path)):
        p = Path(runs)
        paths = [p] if (p / "manifest.json").is_file() else [r.path for r in iter_runs(p)]
    else:
        paths = list(runs)
    return render_comparison(compare_runs(paths), out_dir)


def _gate_status(o: Any) -> str:
    if o.status == "inconclusive" and o.samples_needed:
        return f"INCONCLUSIVE (needs about {o.samples_needed} per run, has {o.samples_per_run})"
    return o.status.upper()


def render_text(cmp: Any, outcomes: list, report: str | None) -> str:
    """The comparison as terminal text: per pair the options that differ, then one row per metric; then the gates."""
    from harness.compare.runs import options_diff  # noqa: PLC0415

    lines = []
    for p in cmp.pairs:
        lines.append(f"B {p.candidate.run_id} ({p.candidate.label}) vs A {p.baseline.run_id} ({p.baseline.label})")
        for r in (p.baseline, p.candidate):
            for n in r.notes[:5]:
                lines.append(f"  note {r.run_id}: {n}")
        for reason in p.forced_reasons:
            lines.append(f"  FORCED: {reason}")
        diff = options_diff(p.baseline.options, p.candidate.options)
        for k, a, b in diff:
            lines.append(f"  option {k}: A {a} | B {b}")
        if not diff:
            lines.append("  options: the same in both runs")
        lines.append(f"  {'metric':46s} {'A':>12s} {'B':>12s} {'δ':>9s} {'interval':>21s} {'p':>8s}  verdict")
        for m in p.metrics:
            d = m.delta
            p_txt = "—" if m.rank is None else f"{m.rank.p_value:.2g}"
            va, vb = fmt_pair(d.a_value, d.b_value, m.unit)
            lines.append(f"  {m.metric[:46]:46s} {va:>12s} {vb:>12s} "
                         f"{fmt_pct(d.delta_rel):>9s} {'[' + fmt_pct(d.ci_low_rel) + ', ' + fmt_pct(d.ci_high_rel) + ']':>21s} "
                         f"{p_txt:>8s}  {m.verdict}")
        c = p.counts()
        lines.append("  verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    for o in outcomes:
        lines.append(f"gate {o.gate} [{o.status}] {o.message}")
    if report:
        lines.append(f"report: {report}")
    return "\n".join(lines)
