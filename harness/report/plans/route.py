"""Text summary of `harness model route`: Cache-aware routing of a scenario: T_first per path, tie bandwidths, uncertain hits, link load (§9.5.4, example 9.7)."""

from __future__ import annotations

from harness.model.kv_plan_records import RoutingPlan
from harness.report.plans._format import ms_or_na as _ms
from harness.units import fmt_num


def _gbps(x: float | None) -> str:
    return fmt_num(x, ".2f", 1e-9, " GB/s", missing="n/a")


def render_text(r: RoutingPlan) -> str:
    lines = [f"Scenario {r.head.scenario}  ({r.head.source})", "", f"  {'path':22s} {'Q':>9s} {'R':>9s} {'C':>9s} {'T_first':>10s}"]
    for p in r.paths:
        lines.append(f"  {p.name:22s} {_ms(p.queue_s):>9s} {_ms(p.ready_s):>9s} {_ms(p.compute_s):>9s} {_ms(p.t_first_s):>10s}")
    t = r.tie_bandwidth_bytes_per_s
    lines += [f"  best: {r.best_path}; fetch ties the local hit at {_gbps(t.vs_local_hit)}, recompute at {_gbps(t.vs_recompute)}"]
    if r.serial_example:
        e = r.serial_example
        lines.append(f"  overlap max(Q,R)+C {_ms(e.overlap_t_first_s)} vs serial Q+R+C {_ms(e.serial_t_first_s)}")
    if r.invalidation:
        i = r.invalidation
        pm = i.min_hit_probability_for_mean
        lines.append(f"Uncertain hit: hit {_ms(i.hit_s)}, miss {_ms(i.miss_s)}; mean beats {_ms(i.alternative_s)} for p > "
                     + ("n/a" if pm is None else f"{pm:.1%}"))
        for b in i.by_probability:
            lines.append(f"  p={b.hit_probability:g}: mean {_ms(b.mean_s)}, p{b.quantile * 100:g} {_ms(b.quantile_s)}")
    if r.link_load:
        ll = r.link_load
        lines.append(f"Fetch link load: {ll.load.fetches_per_s:g}/s -> {ll.load.demand_bytes_per_s / 1e9:.1f} GB/s, "
                     f"{ll.load.utilization:.0%} of {ll.link}")
    if r.state_restore:
        s = r.state_restore
        lines.append(f"Affinity threshold {_ms(s.threshold_s)}: " + ", ".join(f"wait {_ms(c.wait_s)} -> {c.choice}" for c in s.choices))
    return "\n".join(lines)
