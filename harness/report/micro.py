"""Text summary of one microbenchmark run (`harness micro run`, microbench/device_check.py --suites).

One line per case: median, cv, achieved FLOP/s and bytes/s, MFU and MBU; then skips, flags and notes.
"""

from __future__ import annotations

import math
from typing import Any


def _si(x: Any, unit: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def _pct(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.0%}"


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
