"""CI gates: `--fail-on ttft_p99_s:5%,output_tokens_per_s:-3%` and their check (exit 3 on a breach).

A gate METRIC:±P% bounds the relative change δ = B/A − 1 of a metric in one direction:
  ttft_p99_s:5%            fail when the candidate's p99 TTFT is more than 5 % above the baseline's
  output_tokens_per_s:-3%  fail when throughput is more than 3 % below the baseline's
METRIC may be a shell-style pattern (`*/median_s:10%` gates every micro case). A gate is breached
when the estimate is past the bound AND the change is significant in that direction (its bootstrap
interval excludes 0), so noise alone does not fail a build; a change past the bound that is not
significant is reported as a warning. A gate that cannot be checked (a p99 of too few requests, no
samples) is "no data": the caller exits 1, since an unchecked gate must not pass silently.
"""

from __future__ import annotations

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
    status: str  # "pass" | "breach" | "warning" (past the bound, not significant) | "no data"
    message: str

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
    """Every gate must name at least one metric the comparison has."""
    for g in gates:
        if not any(fnmatch.fnmatchcase(k, g.metric) for k in known):
            sample = ", ".join(known[:24]) + (" ..." if len(known) > 24 else "")
            raise HarnessError(f"--fail-on: no compared metric matches {g.metric!r}; compared metrics: {sample}.")


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
                out.append(_outcome(g, mc.metric, p.baseline.run_id, p.candidate.run_id, d.delta_rel, d.ci_low_rel, d.ci_high_rel))
    return out


def _outcome(g: Gate, metric: str, a: str, b: str, delta: float, lo: float, hi: float) -> GateOutcome:
    def o(status: str, msg: str) -> GateOutcome:
        return GateOutcome(g.text, metric, a, b, delta, lo, hi, status, msg)

    if not all(math.isfinite(v) for v in (delta, lo, hi)):
        return o("no data", f"{metric}: no estimate (a run has no samples of it); the gate cannot be checked")
    rise = g.threshold_rel > 0
    past = delta > g.threshold_rel if rise else delta < g.threshold_rel
    significant = lo > 0 if rise else hi < 0
    txt = f"{metric}: {delta * 100:+.2f}% [{lo * 100:+.2f}%, {hi * 100:+.2f}%] vs bound {g.threshold_rel * 100:+g}%"
    if past and significant:
        return o("breach", f"{txt}: BREACH ({b} vs {a})")
    if past:
        return o("warning", f"{txt}: past the bound but not significant (the interval includes 0); rerun longer to decide")
    return o("pass", f"{txt}: pass")
