"""CI gates: `--fail-on ttft_p99_s:5%,output_tokens_per_s:-3%` and their check (exit 3 on a breach).

A gate METRIC:±P% bounds the relative change δ = B/A − 1 of a metric in one direction:
  ttft_p99_s:5%            fail when the candidate's p99 TTFT is more than 5 % above the baseline's
  output_tokens_per_s:-3%  fail when throughput is more than 3 % below the baseline's
METRIC may be a shell-style pattern (`*/median_s:10%` gates every micro case). Each gate ends in one of
  breach        the estimate is past the bound AND the change is significant in that direction (the
                bootstrap interval excludes 0), so noise alone does not fail a build (exit 3);
  pass          the whole interval lies on the good side of the bound: the run shows the change is within it;
  inconclusive  neither: the interval reaches past the bound (e.g. ±60 % around +5 % for a 5 % gate), so the
                runs cannot tell; the outcome says about how many requests (samples) per run would decide it,
                from the interval narrowing as 1/√n around the same estimate (exit 4);
  no data       it cannot be checked (a p99 of too few requests, no samples): exit 1, since an unchecked gate
                must not pass silently.
A gate whose METRIC matches no metric the runs have is refused before the comparison runs (`check_known`).
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import HarnessError

_PERCENT = re.compile(r"^[+-]?\d+(?:\.\d+)?%$")


@dataclass(frozen=True)
class Gate:
    metric: str  # name or fnmatch pattern
    threshold_rel: float  # +0.05: fail above +5 %; -0.03: fail below −3 %

    @property
    def text(self) -> str:
        return f"{self.metric}:{self.threshold_rel * 100:+g}%"


@dataclass(frozen=True)
class GateOutcome:
    gate: str
    metric: str
    baseline_run: str
    candidate_run: str
    delta_rel: float
    ci_low_rel: float
    ci_high_rel: float
    status: str  # "pass" | "breach" | "inconclusive" | "no data"
    message: str
    samples_per_run: int = 0  # min(n_a, n_b): requests (load) or raw samples (micro) behind the interval
    samples_needed: int | None = None  # inconclusive: about how many per run would decide it (None: no length would)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_gates(spec: str | None) -> list[Gate]:
    """'ttft_p99_s:5%,output_tokens_per_s:-3%' -> gates; every malformed item is named with the fix."""
    if spec is None:
        return []
    items = [s.strip() for s in spec.split(",")]
    if not any(items):
        raise HarnessError(f"--fail-on: got {spec!r}; give METRIC:PERCENT items separated by commas, e.g. ttft_p99_s:5%,output_tokens_per_s:-3%.")
    gates = []
    for item in items:
        if not item:
            raise HarnessError(f"--fail-on: empty item in {spec!r}; remove the extra comma.")
        metric, sep, pct = (x.strip() for x in item.rpartition(":"))
        if not sep or not metric or not _PERCENT.match(pct):
            hint = " (the percent sign is required)" if re.match(r"^[+-]?\d+(\.\d+)?$", pct) and metric else ""
            raise HarnessError(f"--fail-on: cannot read {item!r}{hint}; write METRIC:PERCENT, e.g. ttft_p99_s:5% (fail when "
                               "more than 5 % higher) or output_tokens_per_s:-3% (fail when more than 3 % lower).")
        num = float(pct.rstrip("%"))
        if num == 0 or not math.isfinite(num) or abs(num) >= 1000:
            raise HarnessError(f"--fail-on: {item!r}: the percentage must be non-zero and below 1000 %; its sign gives the "
                               "direction that fails (+ for a metric that must not rise, - for one that must not fall).")
        gates.append(Gate(metric, num / 100.0))
    return gates


def check_known(gates: list[Gate], known: list[str]) -> None:
    """Every gate must name at least one metric the comparison has (called on the loaded runs, before any bootstrap)."""
    for g in gates:
        if not any(fnmatch.fnmatchcase(k, g.metric) for k in known):
            sample = ", ".join(known[:24]) + (" ..." if len(known) > 24 else "")
            close = difflib.get_close_matches(g.metric, known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise HarnessError(f"--fail-on: no compared metric matches {g.metric!r}.{hint} Compared metrics: {sample}.")


def check_gates(comparison: Any, gates: list[Gate]) -> list[GateOutcome]:
    """Evaluate every gate against every pair of the comparison."""
    names = list(dict.fromkeys(m.metric for p in comparison.pairs for m in p.metrics))
    check_known(gates, names)
    out = []
    for p in comparison.pairs:
        for g in gates:
            for mc in p.metrics:
                if not fnmatch.fnmatchcase(mc.metric, g.metric):
                    continue
                d = mc.delta
                if mc.verdict == "not enough data":
                    out.append(GateOutcome(g.text, mc.metric, p.baseline.run_id, p.candidate.run_id, d.delta_rel, d.ci_low_rel,
                                           d.ci_high_rel, "no data", f"{mc.metric}: cannot be checked: {mc.note or 'no samples'}"))
                    continue
                unit = "requests" if p.baseline.kind == "load" else "samples"
                out.append(_outcome(g, mc.metric, p.baseline.run_id, p.candidate.run_id, d.delta_rel, d.ci_low_rel, d.ci_high_rel,
                                    min(d.n_a, d.n_b), unit))
    return out


def samples_to_decide(n: int, half_width: float, distance: float) -> int | None:
    """Samples per run at which an interval of `half_width` at `n` samples shrinks (as 1/√n) to `distance`, the gap
    between the estimate and the line it must clear; None when the estimate sits on that line."""
    if n <= 0 or distance <= 0 or not math.isfinite(half_width):
        return None
    return max(n + 1, math.ceil(n * (half_width / distance) ** 2))


def _outcome(g: Gate, metric: str, a: str, b: str, delta: float, lo: float, hi: float, n: int = 0,
             unit: str = "requests") -> GateOutcome:
    def o(status: str, msg: str, need: int | None = None) -> GateOutcome:
        return GateOutcome(g.text, metric, a, b, delta, lo, hi, status, msg, n, need)

    if not all(math.isfinite(v) for v in (delta, lo, hi)):
        return o("no data", f"{metric}: no estimate (a run has no samples of it); the gate cannot be checked")
    rise = g.threshold_rel > 0
    past = delta > g.threshold_rel if rise else delta < g.threshold_rel
    significant = lo > 0 if rise else hi < 0
    within = hi <= g.threshold_rel if rise else lo >= g.threshold_rel
    txt = f"{metric}: {delta * 100:+.2f}% [{lo * 100:+.2f}%, {hi * 100:+.2f}%] vs bound {g.threshold_rel * 100:+g}%"
    if past and significant:
        return o("breach", f"{txt}: BREACH ({b} vs {a})")
    if within:
        return o("pass", f"{txt}: pass")
    # the interval reaches past the bound: to pass it must clear the bound; past the bound, to breach it must clear 0
    if past:
        half, gap, goal = (delta - lo, delta, "show the breach") if rise else (hi - delta, -delta, "show the breach")
    else:
        half, gap, goal = (hi - delta, g.threshold_rel - delta, "pass") if rise else (delta - lo, delta - g.threshold_rel, "pass")
    need = samples_to_decide(n, half, gap)
    if need is None:
        ask = "the estimate sits on the line it must clear, so no run length decides it"
    else:
        ask = (f"about {need} {unit} per run (now {n}) would narrow it enough to {goal}, if the change stays "
               f"{delta * 100:+.1f}% (the interval narrows as 1/√n)")
    return o("inconclusive", f"{txt}: INCONCLUSIVE, the interval is wider than the gap to the bound, so these runs "
                             f"cannot tell; {ask}", need)
