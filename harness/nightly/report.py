"""Nightly report: the drift table and a trend plot per constant (value over time, the rolling baseline's
median ± 5·σ̂ band, drifted nights marked), as index.html (self-contained) and summary.md."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.nightly.drift import MAD_TO_SIGMA, DriftOptions, DriftResult
from harness.report.page import Figure, Page, Table

DPI = 64
PANELS_PER_FIGURE = 12
UNIT_SCALE = {"s": (1e3, "ms"), "bytes/s": (1e-9, "GB/s"), "FLOP/s": (1e-9, "GFLOP/s"), "fraction": (100.0, "%")}


def _scale(unit: str) -> tuple[float, str]:
    return UNIT_SCALE.get(unit, (1.0, unit))


def fmt(x: float, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    k, u = _scale(unit)
    return f"{x * k:.4g} {u}"


def summary_line(r: DriftResult) -> str:
    """One line per constant for cron or CI logs."""
    tag = {"drift": "DRIFT", "ok": "OK", "warming up": "NEW"}[r.status]
    if r.status == "warming up":
        return f"{tag:5s} {r.constant}  {fmt(r.value, r.unit)}  (baseline {r.n_baseline} run(s), too few to judge)"
    z = "inf" if math.isinf(r.z) else f"{r.z:+.1f}"
    extra = f" {r.direction}" if r.direction else ""
    return (f"{tag:5s} {r.constant}  {fmt(r.value, r.unit)}  baseline {fmt(r.baseline_median, r.unit)} "
            f"(MAD {fmt(r.baseline_mad, r.unit)}, n={r.n_baseline})  change {r.change_rel * 100:+.1f}%  z={z}{extra}")


def trend_figure(history: Any, constants: Sequence[str], drifted: set[str], options: DriftOptions) -> bytes:
    """Small multiples: one panel per constant, value against date, with the rolling baseline band."""
    # lazy: matplotlib adds ~0.4 s to nightly's start-up; only the plots use it
    from matplotlib.dates import AutoDateLocator, DateFormatter
    from matplotlib.figure import Figure as MplFigure

    ncols = 3
    nrows = max(1, math.ceil(len(constants) / ncols))
    # fixed margins: constrained layout costs about half the drawing time of a 12-panel figure
    fig = MplFigure(figsize=(4.2 * ncols, 2.3 * nrows), dpi=DPI)
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.35 / nrows, bottom=0.45 / nrows, wspace=0.3, hspace=0.75)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    groups = {c: g for c, g in history[history["constant"].isin(list(constants))].groupby("constant", sort=False)}
    for ax, c in zip(axes, constants):
        g = groups.get(c)
        if g is None:
            ax.set_visible(False)
            continue
        k, u = _scale(str(g["unit"].iloc[0]))
        t = (g["created_unix_s"].to_numpy(dtype=float)).astype("datetime64[s]")
        v = g["value"].to_numpy(dtype=float) * k
        ax.plot(t, v, ".-", lw=0.8, ms=3, color="C0")
        n = options.baseline_runs
        if v.size > options.min_history:
            med = np.full(v.size, np.nan)
            spread = np.full(v.size, np.nan)
            for i in range(options.min_history, v.size):
                b = v[max(0, i - n):i]
                med[i] = np.median(b)
                spread[i] = options.z_threshold * MAD_TO_SIGMA * np.median(np.abs(b - med[i]))
            ax.plot(t, med, "-", color="grey", lw=0.8)
            ax.fill_between(t, med - spread, med + spread, color="grey", alpha=0.2, lw=0)
        if c in drifted:
            ax.plot(t[-1:], v[-1:], "o", color="red", ms=7)
        ax.set_title(c if len(c) <= 60 else "…" + c[-59:], fontsize=7, color="red" if c in drifted else "black")
        ax.set_ylabel(u, fontsize=7)
        ax.tick_params(labelsize=6)
        if t.size and t[-1] - t[0] < np.timedelta64(1, "D"):  # runs within a day: the axis shows days, so pad it to one
            mid = t[0] + (t[-1] - t[0]) // 2
            ax.set_xlim(mid - np.timedelta64(12, "h"), mid + np.timedelta64(12, "h"))
        ax.xaxis.set_major_locator(AutoDateLocator(maxticks=4))
        ax.xaxis.set_major_formatter(DateFormatter("%m-%d"))
        ax.grid(True, alpha=0.3)
    for ax in axes[len(constants):]:
        ax.set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def render_nightly(history: Any, results: list[DriftResult], out_dir: str | Path, options: DriftOptions,
                   steps: Sequence[tuple[str, str, str]] = (), links: Sequence[tuple[str, str]] = ()) -> list[Path]:
    """steps: (step, status, detail) of the pipeline; links: (what, path) of other reports."""
    drifted = {r.constant for r in results if r.status == "drift"}
    machines = sorted({r.machine for r in results}) or sorted(set(history["machine"])) if len(history) else []
    page = Page(f"Nightly: {', '.join(machines) or 'no machine'}",
                f"{history['run_id'].nunique() if len(history) else 0} run(s) in the history; drift when |z| > "
                f"{options.z_threshold:g} and |change| > {options.min_change:.0%} against the median and MAD of the last "
                f"{options.baseline_runs} runs (at least {options.min_history}).")
    if steps:
        page.section("Pipeline").items.append(Table(["step", "status", "detail"], [list(s) for s in steps]))
    if links:
        page.section("Other reports").items.append(Table(["report", "path"], [list(x) for x in links]))
    order = sorted(results, key=lambda r: ({"drift": 0, "warming up": 2}.get(r.status, 1), r.constant))
    s = page.section("Constants")
    s.items.append(Table(["status", "constant", "latest", "baseline median", "MAD", "n", "change", "z"],
                         [[r.status.upper() + (f" ({r.direction})" if r.direction else ""), r.constant, fmt(r.value, r.unit),
                           fmt(r.baseline_median, r.unit), fmt(r.baseline_mad, r.unit), str(r.n_baseline),
                           "—" if not math.isfinite(r.change_rel) else f"{r.change_rel * 100:+.1f}%",
                           "—" if math.isnan(r.z) else f"{r.z:+.1f}"] for r in order]))
    t = page.section("Trends")
    consts = [r.constant for r in order]
    for i in range(0, len(consts), PANELS_PER_FIGURE):
        chunk = consts[i:i + PANELS_PER_FIGURE]
        t.items.append(Figure(f"trends-{i // PANELS_PER_FIGURE + 1:03d}", f"Trends {i + 1}–{i + len(chunk)} of {len(consts)}",
                              trend_figure(history, chunk, drifted, options),
                              "Value per night; grey: rolling baseline median with ± z-threshold·σ̂; red dot: drifted."))
    return page.write(out_dir)
