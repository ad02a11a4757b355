"""Predicted against measured TTFT and TPOT of `harness validate silicon`, ours beside aiconfigurator's (one PNG)."""

from __future__ import annotations

from pathlib import Path

from harness.predict.silicon import DENSE_MODELS, SiliconValidation


def plot_validation(v: SiliconValidation, path: str | Path) -> Path:
    import matplotlib  # noqa: PLC0415 - matplotlib only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(2, 2, figsize=(11, 10))
    for col, (metric, label) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
        for row, (who, name) in enumerate((("", "harness twin"), ("aic_", "aiconfigurator 0.12.0"))):
            ax = axes[row][col]
            for kind, colour, marker in (("dense agg", "tab:blue", "o"), ("MoE agg", "tab:orange", "s"), ("disagg", "tab:green", "^")):
                xs, ys = [], []
                for r in v.rows:
                    k = "disagg" if r.mode == "disagg" else ("dense agg" if r.model in DENSE_MODELS else "MoE agg")
                    pred = getattr(r, f"{who}{metric}_s")
                    if k == kind and pred is not None:
                        xs.append(getattr(r, f"measured_{metric}_s") * 1e3)
                        ys.append(pred * 1e3)
                if xs:
                    ax.scatter(xs, ys, s=12, alpha=0.6, c=colour, marker=marker, label=f"{kind} ({len(xs)})")
            vals = [getattr(r, f"measured_{metric}_s") * 1e3 for r in v.rows] + \
                   [getattr(r, f"{w}{metric}_s") * 1e3 for r in v.rows for w in ("", "aic_") if getattr(r, f"{w}{metric}_s")]
            a, b = min(vals) / 1.5, max(vals) * 1.5
            ax.set_xlim(a, b)
            ax.set_ylim(a, b)
            ax.plot([a, b], [a, b], "k-", lw=0.8)
            ax.plot([a, b], [a * 1.2, b * 1.2], "k:", lw=0.6)
            ax.plot([a, b], [a / 1.2, b / 1.2], "k:", lw=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(f"measured {label} (ms)")
            ax.set_ylabel(f"predicted {label} (ms)")
            ax.set_title(f"{name}: {label}, {v.system}")
            ax.legend(fontsize=8)
    fig.suptitle(f"Predicted vs measured mean TTFT / TPOT, {v.system} rows of silicon_sample.csv (dotted: ±20 %)")
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=90)
    plt.close(fig)
    return p
