"""Report figures drawn with matplotlib (Agg, no pyplot state) from fitted or planned numbers -> PNG bytes.

Units are turned into ms, GB/s and TFLOP/s here, and only here (the model and fits stay in base units).
"""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

DPI = 80


def _fig(w: float = 7.0, h: float = 4.2, ncols: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)  # fixed margins: constrained layout costs seconds per figure
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.13, top=0.9, wspace=0.3)
    axes = fig.subplots(1, ncols) if ncols > 1 else fig.subplots()
    return fig, axes


def _log(ax, x: bool = True, y: bool = True, base: float = 10) -> None:
    """Log axes with major ticks only (minor tick labels dominate the drawing time)."""
    if x:
        ax.set_xscale("log", base=base)
    if y:
        ax.set_yscale("log")
    ax.minorticks_off()


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def roofline(device: str, peak_flops_per_s: float | None, peak_bytes_per_s: float | None,
             points: Sequence[tuple[float, float, str]]) -> bytes:
    """Attainable FLOP/s = min(peak, AI·bandwidth) with measured (arithmetic intensity, FLOP/s, suite) points."""
    fig, ax = _fig()
    ais = np.array([p[0] for p in points], dtype=float) if points else np.array([1.0])
    lo, hi = max(min(ais.min(), 1.0) / 4, 1e-3), max(ais.max() * 4, 1e3)
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    if peak_flops_per_s and peak_bytes_per_s:
        ax.plot(x, np.minimum(peak_flops_per_s, x * peak_bytes_per_s) / 1e12, "k-", label="spec roofline")
        ax.plot(x, np.minimum(0.5 * peak_flops_per_s, x * 0.5 * peak_bytes_per_s) / 1e12, "k:", label="50% of peak (chapter default)")
    elif peak_flops_per_s:
        ax.axhline(peak_flops_per_s / 1e12, color="k", label="spec peak FLOP/s")
    for suite, marker in (("gemm", "o"), ("decode", "s"), ("stage", "^"), ("moe", "D")):
        sel = [p for p in points if p[2] == suite]
        if sel:
            ax.scatter([p[0] for p in sel], [p[1] / 1e12 for p in sel], marker=marker, label=f"measured {suite}", zorder=3)
    _log(ax)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, useful counts)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline: {device}")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return _png(fig)


def _ctx(c: Any) -> str:
    """", context 4096" for a decode curve measured at one context (MBU depends on it), else ""."""
    ctx = getattr(c, "context_tokens", None)
    return f", context {ctx}" if ctx else ""


def efficiency_curves(curves: Sequence[Any], x_label: str, title: str, reference: Sequence[tuple[float, float]] = (),
                      reference_label: str = "", mark_x: float | None = None) -> bytes:
    """Measured efficiency (with 95% intervals) and the interpolation used, per device/dtype."""
    fig, ax = _fig()
    for c in curves:
        xs = np.array([p.x for p in c.points])
        ys = np.array([p.measured.value for p in c.points])
        err = np.array([[p.measured.value - p.measured.low for p in c.points], [p.measured.high - p.measured.value for p in c.points]])
        line = ax.errorbar(xs, ys * 100, yerr=err * 100, fmt="o", capsize=3, label=f"{c.device} {c.dtype}{_ctx(c)} measured")
        grid = np.linspace(xs.min(), xs.max(), 200)
        ax.plot(grid, [c.at(g) * 100 for g in grid], "-", color=line[0].get_color(), alpha=0.7,
                label=f"{c.device} {c.dtype}{_ctx(c)} {'monotone ' if c.monotone else ''}interpolation")
    if reference:
        ax.plot([r[0] for r in reference], [r[1] * 100 for r in reference], "k--", marker="x", label=reference_label)
    ax.axhline(50, color="grey", ls=":", label="chapter default 50%")
    if mark_x is not None:
        ax.axvline(mark_x, color="grey", ls="-.", alpha=0.6, label=f"scenario ({mark_x:g})")
    _log(ax, y=False, base=2)
    ax.set_xlabel(x_label)
    ax.set_ylabel("% of spec peak")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return _png(fig)


def link_fit(lf: Any) -> bytes:
    """T(S) measured vs α + S/β (log-log), and the relative residuals per size."""
    fig, (ax, ar) = _fig(9.0, 3.8, ncols=2)
    s = np.array(lf.sizes_bytes)
    pos = s > 0  # a zero-byte transfer (pure α) has no place on a log axis
    med, res = np.array(lf.median_s)[pos], np.array(lf.residual_fraction)[pos]
    s = s[pos]
    ax.plot(s, med * 1e6, "o", label="measured median")
    grid = np.logspace(np.log10(s.min()), np.log10(s.max()), 100)
    a, bw = lf.alpha_s.value, lf.bandwidth_bytes_per_s.value
    ax.plot(grid, (a + grid / bw) * 1e6, "-", label=f"α = {a * 1e6:.2f} µs, β = {bw / 1e9:.2f} GB/s")
    _log(ax)
    ax.set_xlabel("transfer size (bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title(f"α–β fit: {lf.key}")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    ar.plot(s, res * 100, "o-")
    _log(ar, y=False)
    ar.axhline(0, color="k", lw=0.8)
    ar.set_xlabel("transfer size (bytes)")
    ar.set_ylabel("residual (% of fit)")
    ar.set_title("residuals")
    ar.grid(True, alpha=0.3)
    return _png(fig)


def pd_heatmaps(panels: Sequence[tuple[str, np.ndarray, list[tuple[int, int]]]], x_label: str, y_label: str) -> bytes:
    """Fig. 9-10: sustainable req/s for every split (x: first GPU type in P, y: second), optimal cells framed."""
    from matplotlib.patches import Rectangle

    fig, axes = _fig(4.6 * len(panels), 4.2, ncols=len(panels))
    axes = np.atleast_1d(axes)
    vmax = max(float(np.nanmax(p[1])) for p in panels) or 1.0
    for ax, (title, grid, optimal) in zip(axes, panels):
        im = ax.imshow(grid.T, origin="lower", cmap="Blues", vmin=0, vmax=vmax)
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                v = grid[i, j]
                ax.text(i, j, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v > 0.6 * vmax else "black")
        for i, j in optimal:
            ax.add_patch(Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, ec="red", lw=2))
        ax.set_xticks(range(grid.shape[0]))
        ax.set_yticks(range(grid.shape[1]))
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=list(axes), label="req/s", shrink=0.8)
    return _png(fig)


def drain_curves(arrival_rate_per_s: float, startup_s: float, deadline_s: float | None,
                 schemes: Sequence[tuple[str, float, str]], horizon_s: float | None = None) -> bytes:
    """Fig. 9-42: fluid queue length after startup for each (label, μ, line style)."""
    from harness.model.queueing import queue_length

    fig, ax = _fig()
    end = horizon_s or max(80.0, (deadline_s or 60.0) * 1.4)
    t = np.linspace(0, end, 400)
    for label, mu, style in schemes:
        ax.plot(t, queue_length(arrival_rate_per_s, startup_s, mu, t), style, label=f"{label} (μ = {mu:.2f}/s)")
    ax.axvline(startup_s, color="grey", ls=":", label=f"ready at {startup_s:g} s")
    if deadline_s:
        ax.axvline(deadline_s, color="red", ls="--", alpha=0.6, label=f"deadline {deadline_s:g} s")
    ax.set_xlabel("time since startup began (s)")
    ax.set_ylabel("queued requests")
    ax.set_title(f"Startup backlog drain, λ = {arrival_rate_per_s:g} req/s")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return _png(fig)


def predicted_vs_measured(rows: Sequence[tuple[str, float, float | None, float | None, float, float]], title: str,
                          unit: str) -> bytes:
    """Bars per item: measured (with interval), predicted at datasheet defaults, predicted with calibration.

    rows: (label, measured, predicted_default, predicted_calibrated, measured_low, measured_high)."""
    fig, ax = _fig(max(6.0, 1.6 * len(rows) + 2), 4.0)
    x = np.arange(len(rows))
    w = 0.27
    meas = np.array([r[1] for r in rows])
    err = np.array([[r[1] - r[4] for r in rows], [r[5] - r[1] for r in rows]])
    ax.bar(x - w, meas, w, yerr=err, capsize=3, label="measured")
    ax.bar(x, [r[2] if r[2] is not None else np.nan for r in rows], w, label="predicted, datasheet 50%")
    ax.bar(x + w, [r[3] if r[3] is not None else np.nan for r in rows], w, label="predicted, calibrated")
    ax.set_xticks(x)
    ax.set_xticklabels([r[0] for r in rows], fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)
