"""Text summary of one microbenchmark run (`harness micro run`, microbench/device_check.py --suites).

One line per case: median, cv, achieved FLOP/s and bytes/s, MFU and MBU; then skips, flags and notes.
"""

from __future__ import annotations

from typing import Any

from harness.units import fmt_pct, fmt_si


def _si(x: Any, unit: str) -> str:
    return fmt_si(x, unit, missing="-")


def _pct(x: Any) -> str:
    return fmt_pct(x, 0, missing="-")


def render_summary(s: dict[str, Any]) -> str:
    lines = [f"run {s['run_id']} -> {s['path']}", ""]
    lines.append(f"  {'case':58s} {'median':>10s} {'cv':>5s} {'FLOP/s':>12s} {'bytes/s':>12s} {'MFU':>5s} {'MBU':>5s}")
    for c in s["cases"]:
        mark = "!" if not c["valid"] else ("~" if c["unstable"] else " ")
        lines.append(
            f"{mark} {c['case_id'][:58]:58s} {_si(c['median_s'], 's'):>10s} {c['cv']:5.1%} {_si(c['flops_per_s'], 'FLOP/s'):>12s} "
            f"{_si(c['bytes_per_s'], 'B/s'):>12s} {_pct(c['mfu']):>5s} {_pct(c['mbu']):>5s}"
        )
    if s["skips"]:
        lines += ["", "skipped:"] + [f"  {k['suite']}:{k['case']}: {k['reason']}" for k in s["skips"]]
    flagged = [c for c in s["cases"] if c["flags"]]
    if flagged:
        lines += ["", "flags (! invalid, ~ unstable):"]
        for c in flagged:
            for f in c["flags"]:
                lines.append(f"  {c['case_id']}: {f}")
    if s["notes"]:
        lines += ["", "notes:"] + [f"  {n}" for n in s["notes"]]
    return "\n".join(lines)
