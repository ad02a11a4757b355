"""Rate series and rate search for bench-pd: one run per rate into one run group, and a latency–throughput report.

`--rate 1,2,4,8` runs the listed rates in order (one stored run each, all tagged with the same
`run_group` in their manifests). `--rate auto` searches for the highest rate that meets the SLOs:

  A rate PASSES when its run is valid and at least `slo_attainment` (default 90 %) of its measured
  requests met every SLO given (`goodput_fraction`). Start at the scenario's rate (or `--auto-start`);
  while it passes, double it; while it fails, halve it; once a passing and a failing rate bracket the
  answer, bisect. STOP when the bracket is narrower than `rel_tol` (10 %) of the passing rate, or after
  `max_steps` runs (default 8), whichever comes first. The answer is the highest passing rate measured
  (none, if every run failed: the report says so).

Each point is the run's own summary; nothing is interpolated. A step the over-saturation rule cut short
(workloads/oversaturation.py; on by default for a series and the search, `--no-early-stop` to run every step to its
end) fails and is marked. The KNEE is the highest rate measured that met the SLOs, for a series as for the search.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from harness.errors import HarnessError
from harness.records import new_run_id

MAX_RATES = 64


@dataclass(frozen=True)
class RatePoint:
    rate_per_s: float
    run_dir: str
    valid: bool
    passes: bool  # valid and goodput_fraction >= slo_attainment
    request_throughput_per_s: float
    request_throughput_incl_drain_per_s: float
    output_tokens_per_s: float
    goodput_per_s: float | None
    goodput_fraction: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    e2e_p90_s: float | None
    invalid_reasons: list[str] = field(default_factory=list)
    stopped_early: str | None = None  # why the step was cut short (over-saturated, workloads.oversaturation); it then fails
    steady: bool | None = None  # the window's steadiness (workloads.summary): a figure not steady says so in the table


@dataclass(frozen=True)
class RateSweepResult:
    group_id: str
    mode: str  # "series" or "auto"
    points: list[RatePoint]
    slo: dict[str, Any]
    slo_attainment: float
    best_rate_per_s: float | None = None  # auto: the highest passing rate measured
    stop_reason: str = ""
    report_paths: list[str] = field(default_factory=list)

    @property
    def knee_rate_per_s(self) -> float | None:
        """The knee: the highest rate measured that met the SLOs (series and search alike); None when none did."""
        ok = [p.rate_per_s for p in self.points if p.passes]
        return max(ok) if ok else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "knee_rate_per_s": self.knee_rate_per_s}


def parse_rate(text: str | None) -> float | list[float] | str | None:
    """'' or None: the scenario's rate; '3.5': one rate; '1,2,4': a series; 'auto': the search."""
    if text is None or str(text).strip() == "":
        return None
    t = str(text).strip()
    if t == "auto":
        return "auto"
    parts = [p.strip() for p in t.split(",") if p.strip()]
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise HarnessError(f"--rate {t!r}: give requests per second (3.5), a list (1,2,4,8) or 'auto'.") from None
    bad = [v for v in vals if not (math.isfinite(v) and 0 < v < 1e6)]
    if bad or not vals:
        raise HarnessError(f"--rate {t!r}: every rate must be a positive number of requests per second below 1e6.")
    if len(vals) > MAX_RATES:
        raise HarnessError(f"--rate lists {len(vals)} rates; at most {MAX_RATES} per series.")
    return vals[0] if len(vals) == 1 and "," not in t else vals


def _point(rate: float, res: Any, slo_attainment: float) -> RatePoint:
    s = res.summary  # a workloads.summary.LoadSummary
    frac = s.goodput_fraction
    cut = ((getattr(res, "extras", None) or {}).get("early_stop") or {})
    stopped = f"over-saturated at {cut['t_s']:.1f} s" if cut else None
    return RatePoint(
        rate_per_s=rate, run_dir=res.run_dir, valid=s.valid, stopped_early=stopped,
        passes=s.valid and frac is not None and frac >= slo_attainment and not stopped,
        request_throughput_per_s=s.request_throughput_per_s, request_throughput_incl_drain_per_s=s.request_throughput_incl_drain_per_s,
        output_tokens_per_s=s.output_tokens_per_s, goodput_per_s=s.goodput_per_s,
        goodput_fraction=frac, ttft_p50_s=s.ttft_s.p50, ttft_p90_s=s.ttft_s.p90, tpot_p50_s=s.tpot_s.p50,
        tpot_p90_s=s.tpot_s.p90, e2e_p90_s=s.e2e_s.p90, invalid_reasons=list(s.invalid_reasons), steady=s.steady,
    )


def _group_id() -> str:
    return new_run_id("rate-group")


def run_series(opts: Any, rates: list[float], run_one: Callable[[Any], Any], *, slo_attainment: float = 0.9) -> RateSweepResult:
    """One bench-pd run per rate, in the order given."""
    gid = _group_id()
    points = []
    for k, r in enumerate(rates):
        res = run_one(replace(opts, rate_per_s=r, run_group={"id": gid, "index": k, "mode": "series", "rates": rates}))
        points.append(_point(r, res, slo_attainment))
    out = RateSweepResult(gid, "series", points, _slo(opts), slo_attainment, stop_reason=f"ran the {len(rates)} rates given")
    return _with_report(out, opts)


def search_rate(opts: Any, run_one: Callable[[Any], Any], *, start_per_s: float, slo_attainment: float = 0.9,
                max_steps: int = 8, rel_tol: float = 0.1) -> RateSweepResult:
    """The highest rate meeting the SLOs, by doubling/halving then bisection (stop rule in the module docstring)."""
    if not (start_per_s > 0 and math.isfinite(start_per_s)):
        raise HarnessError(f"--auto-start must be a positive rate, got {start_per_s!r}.")
    if not 1 <= max_steps <= MAX_RATES:
        raise HarnessError(f"--auto-max-steps must be in [1, {MAX_RATES}], got {max_steps!r}.")
    if not 0 < slo_attainment <= 1:
        raise HarnessError(f"--slo-attainment must be in (0, 1], got {slo_attainment!r}.")
    if all(getattr(opts, f) is None for f in ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s")):
        raise HarnessError("--rate auto needs at least one SLO (--slo-ttft-s, --slo-tpot-s or --slo-e2e-s) to search against.")
    gid = _group_id()
    points: list[RatePoint] = []
    lo: float | None = None  # highest passing rate
    hi: float | None = None  # lowest failing rate
    rate = start_per_s
    reason = f"reached the bound of {max_steps} runs"
    for k in range(max_steps):
        res = run_one(replace(opts, rate_per_s=rate, run_group={"id": gid, "index": k, "mode": "auto"}))
        pt = _point(rate, res, slo_attainment)
        points.append(pt)
        if pt.passes:
            lo = rate if lo is None else max(lo, rate)
        else:
            hi = rate if hi is None else min(hi, rate)
        if lo is not None and hi is not None:
            if hi - lo <= rel_tol * lo:
                reason = f"bracket [{lo:.4g}, {hi:.4g}] req/s narrower than {rel_tol:.0%} of the passing rate"
                break
            rate = (lo + hi) / 2.0
        elif lo is not None:
            rate = lo * 2.0
        else:
            rate = hi / 2.0
    out = RateSweepResult(gid, "auto", points, _slo(opts), slo_attainment, best_rate_per_s=lo, stop_reason=reason)
    return _with_report(out, opts)


def _slo(opts: Any) -> dict[str, Any]:
    return {"ttft_s": opts.slo_ttft_s, "tpot_s": opts.slo_tpot_s, "e2e_s": opts.slo_e2e_s}


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.1f}"


def table_lines(r: RateSweepResult) -> list[str]:
    lines = [f"| rate (req/s) | valid | meets SLOs | cut short | req/s (window) | req/s incl. drain | output tok/s | goodput req/s | "
             f"TTFT p50 / p90 (ms) | TPOT p50 / p90 (ms) | E2E p90 (ms) | run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(r.points, key=lambda p: p.rate_per_s):
        lines.append(f"| {p.rate_per_s:.4g} | {'yes' if p.valid else 'NO'} | {'yes' if p.passes else 'no'} | {p.stopped_early or '—'} | "
                     f"{p.request_throughput_per_s:.3f}{' (NOT steady)' if p.steady is False else ''} | "
                     f"{p.request_throughput_incl_drain_per_s:.3f} | {p.output_tokens_per_s:.0f} | "
                     f"{'—' if p.goodput_per_s is None else f'{p.goodput_per_s:.3f}'} | {_ms(p.ttft_p50_s)} / {_ms(p.ttft_p90_s)} | "
                     f"{_ms(p.tpot_p50_s)} / {_ms(p.tpot_p90_s)} | {_ms(p.e2e_p90_s)} | {Path(p.run_dir).name} |")
    return lines


def summary_lines(r: RateSweepResult) -> list[str]:
    slo = ", ".join(f"{k} ≤ {v:g} s" for k, v in r.slo.items() if v is not None) or "none"
    head = [f"run group {r.group_id} ({r.mode}, {len(r.points)} runs, open loop); SLOs {slo}; a rate meets them when the run is "
            f"valid and ≥ {r.slo_attainment:.0%} of the requests that ended in its window met every SLO"]
    knee = r.knee_rate_per_s
    top = max((p.rate_per_s for p in r.points), default=None)
    if knee is None:
        head.append("knee: no rate tried met the SLOs")
    elif knee == top:  # nothing above it was tried, so no knee was found: a lower bound only
        head.append(f"knee: not found — every rate tried met the SLOs, up to {knee:.4g} req/s (the highest tried: the knee "
                    "is at or above it; try higher rates)")
    else:
        head.append(f"knee (highest rate measured that met the SLOs): {knee:.4g} req/s")
    cut = [p for p in r.points if p.stopped_early]
    if cut:
        head.append(f"{len(cut)} step(s) cut short as over-saturated (rates {', '.join(f'{p.rate_per_s:g}' for p in cut)}): "
                    "both the in-flight count and TTFT grew over the last 30 s beyond their 95 % bounds (workloads/oversaturation.py)")
    if r.mode == "auto":
        head.append(f"stopped: {r.stop_reason}")
    return head


def _with_report(r: RateSweepResult, opts: Any) -> RateSweepResult:
    if not opts.report_dir:
        return r
    d = Path(opts.report_dir) / r.group_id
    try:
        d.mkdir(parents=True, exist_ok=True)
        md = d / "latency-throughput.md"
        md.write_text("# Latency vs throughput\n\n" + "\n".join(summary_lines(r)) + "\n\n" + "\n".join(table_lines(r)) + "\n\n"
                      "Steady req/s counts completions inside each run's window; req/s incl. drain is vLLM bench serve's "
                      "completions ÷ (t0 … last completion). Every point is one stored run.\n")
        js = d / "latency-throughput.json"
        js.write_text(json.dumps(r.to_dict(), indent=2, default=str))
        paths = [str(md), str(js)]
        png = _figure(r, d / "latency-throughput.png")
        if png:
            paths.append(str(png))
    except OSError as exc:
        raise HarnessError(f"cannot write the rate report under {opts.report_dir!r} ({exc}); give a writable --report-dir.") from None
    return replace(r, report_paths=paths)


def _figure(r: RateSweepResult, path: Path) -> Path | None:
    pts = [p for p in sorted(r.points, key=lambda p: p.rate_per_s) if p.ttft_p90_s is not None]
    if not pts:
        return None
    # lazy: matplotlib adds ~0.4 s to bench-pd's start-up; only the plot uses it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib adds ~0.4 s to bench-pd's start-up; only the plot uses it
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    x = [p.request_throughput_incl_drain_per_s for p in pts]
    ax[0].plot(x, [p.ttft_p90_s * 1e3 for p in pts], "o-", label="TTFT p90")
    ax[0].plot(x, [p.ttft_p50_s * 1e3 for p in pts], "o--", label="TTFT p50")
    ax[0].set_xlabel("completed req/s (incl. drain)")
    ax[0].set_ylabel("ms")
    ax[0].legend()
    ax[1].plot(x, [(p.tpot_p90_s or math.nan) * 1e3 for p in pts], "o-", label="TPOT p90")
    ax[1].set_xlabel("completed req/s (incl. drain)")
    ax[1].legend()
    for p in pts:
        ax[0].annotate(f"{p.rate_per_s:g}" + (" (cut)" if p.stopped_early else ""),
                       (p.request_throughput_incl_drain_per_s, p.ttft_p90_s * 1e3), fontsize=7)
    knee = [p for p in pts if p.rate_per_s == r.knee_rate_per_s]
    if knee:
        ax[0].plot([knee[0].request_throughput_incl_drain_per_s], [knee[0].ttft_p90_s * 1e3], "r*", ms=12, label="knee")
        ax[0].legend()
    fig.suptitle("Latency vs throughput (one point per run; labels: offered rate)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
