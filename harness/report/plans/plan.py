"""Text summary of `harness model plan`: Capacity plan of a scenario: stage rates, KV hand-off, colocated vs PD vs chunked, drain, cost."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields

from harness.model.plan import Plan
from harness.units import fmt_num


def _f(x: float | None, unit: str = "", nd: int = 2) -> str:
    return fmt_num(x, f".{nd}f", suffix=unit, missing="n/a")


def _alloc(a: Mapping[str, int]) -> str:
    return " + ".join(f"{n}×{g}" for g, n in a.items() if n) or "none"


def render_text(r: Plan) -> str:
    w = r.workload
    lines = [
        f"Scenario {r.scenario}  ({r.source})",
        f"  model {r.model}: {w.input_tokens} in ({w.cached_prefix_tokens} cached) / {w.output_tokens} out, "
        f"decode batch {w.decode_batch}, arrival {w.arrival_rate_per_s:g} req/s",
        *(f"  WARNING {w}" for w in (r.warnings or ())),
        "",
        "Stage rates per GPU (Chapter 9, §9.2.3):",
        f"  {'gpu':16s} {'r_P tok/s':>10s} {'d_P s':>7s} {'step ms':>8s} {'r_D calls/s':>12s} {'d_D s':>7s}  bound P/D   efficiency",
    ]
    for g, s in r.stage_rates.items():
        e = s.efficiency
        gname = g if s.tensor_parallel == 1 else f"{g} TP{s.tensor_parallel}"  # a TP row is one instance of that many cards
        lines.append(
            f"  {gname:16s} {s.prefill_tokens_per_s:10.0f} {s.prefill_s_per_request:7.3f} {s.decode_step_s * 1e3:8.1f} "
            f"{s.decode_calls_per_s:12.0f} {s.decode_s_per_request:7.3f}  {s.prefill_bound[:4]}/{s.decode_bound[:3]}   "
            f"{e.compute:.0%}/{e.bandwidth:.0%} ({e.source})"
        )
    kv = r.kv
    lines += [
        "",
        f"KV hand-off (§9.2.2): {kv.bytes_per_token / 1024:.1f} KiB/token, {kv.bytes_per_request / 2**30:.3f} GiB/request"
        + (f", {kv.transfer_s * 1e3:.1f} ms over {kv.link}" if kv.transfer_s else ", no link declared"),
        "",
        "Capacity (req/s):",
        f"  colocated replicas        {r.colocated.requests_per_s:.2f}",
        f"  ideal chunked colocated   {r.chunked_colocated.requests_per_s:.2f}",
    ]
    pd = r.pd
    if pd:
        b = pd.best
        link = None if math.isinf(b.link_requests_per_s) else b.link_requests_per_s
        lines.append(
            f"  PD best                   {b.requests_per_s:.2f}   P: {_alloc(b.prefill)} ({b.prefill_pool_requests_per_s:.2f}), "
            f"D: {_alloc(b.decode)} ({b.decode_pool_requests_per_s:.2f}), link {_f(link)}; bound by {b.bound}"
        )
        for name, a in pd.references.items():
            lines.append(f"  PD {name:22s} {a.requests_per_s:.2f}   P: {_alloc(a.prefill)}, D: {_alloc(a.decode)}")
    elif any(w.startswith("PD capacity 0") for w in (r.warnings or ())):
        lines.append("  PD best                   0.00   no GPU type holds its stage in HBM (see WARNING above)")
    st = r.startup
    if st.startup_s:
        lines += ["", f"Startup drain (§9.6.1): backlog {st.backlog_requests:.1f} requests after {st.startup_s:g} s"
                  + (f"; deadline {st.deadline_s:g} s needs μ ≥ {st.min_requests_per_s_for_deadline:.2f}" if st.deadline_s else "")]
        for name, d in r.drain.items():
            clear = "never clears" if d.clear_at_s is None else f"clears at {d.clear_at_s:.1f} s"
            ok = "" if d.meets_deadline is None else ("  meets deadline" if d.meets_deadline else "  MISSES deadline")
            lines.append(f"  {name:24s} μ={d.service_rate_per_s:.2f}  {clear}{ok}")
    for f, e in r.sensitivity.efficiency_scale.items():
        if e.pd is not None:
            c = e.pd.pd_best_clear_at_s
            lines.append(f"  efficiency ×{f}: PD best {e.pd.pd_best.requests_per_s:.2f} req/s, "
                         + ("never clears" if c is None else f"clears at {c:.1f} s"))
    dep = r.deployment
    if dep:
        lines += ["", "Deployment comparison (§9.7.2):",
                  f"  {'scheme':10s} {'state':12s} {'GiB/req':>8s} {'compute':>8s} {'link':>8s} {'total':>7s} {'GB/s@λ':>7s} {'GB/s@μ':>7s}"]
        for row in dep.schemes:
            lines.append(
                f"  {row.scheme:10s} {row.state:12s} {row.link_bytes_per_request / 2**30:8.3f} {row.compute_requests_per_s:8.2f} "
                f"{_f(row.link_requests_per_s, nd=1):>8s} {row.requests_per_s:7.2f} {row.link_demand_at_arrival_bytes_per_s / 1e9:7.1f} "
                f"{row.link_demand_at_capacity_bytes_per_s / 1e9:7.1f}"
            )
        if dep.note:
            lines.append(f"  ({dep.note})")
        so = dep.scale_out
        if so.copies_to_sustain and so.copies_to_sustain > 1 or (so.copies_for_deadline or 1) > 1:
            deadline = ("" if so.copies_for_deadline is None else
                        f", {so.copies_for_deadline} for the deadline ({_f(so.rate_with_deadline_copies)} req/s)")
            lines.append(f"  scale-out: {so.copies_to_sustain} copies to keep up ({_f(so.rate_with_sustain_copies)} req/s){deadline}")
        c = dep.cost
        if c:
            lines.append(
                f"  cost per 1000 requests ({c.currency}, {c.price_per_hour:g}/h): at arrival {_f(c.per_1000_at_arrival_rate)}, "
                f"at capacity replicas {_f(c.per_1000_at_capacity.replicas)}"
                + (f" / PD {_f(c.per_1000_at_capacity.pd)}" if r.pd is not None else "")
                + (f"; only {c.slo.slo_fraction:.0%} in SLO -> {_f(c.slo.effective_per_1000_good)}" if c.slo else "")
            )
    cal = r.calibration
    if cal:  # issue 6: where every constant came from, and capacity over their 95% intervals
        lines += ["", f"Calibration {cal.file} (machine {cal.machine}):"]
        for k in cal.constants:
            iv = "" if k.low is None else f" [{k.low:.4g}, {k.high:.4g}]"
            lines.append(f"  {k.constant:42s} {k.value:.4g}{iv}  {k.origin}")
        for f in fields(cal.capacity_interval):
            v = getattr(cal.capacity_interval, f.name)
            if v.value is not None:
                lines.append(f"  {f.name:42s} {v.value:.2f} [{_f(v.low)}, {_f(v.high)}]")
    return "\n".join(lines)
