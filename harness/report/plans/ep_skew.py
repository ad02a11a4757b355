"""Text summary of `harness model ep-skew`: Skew under large EP: rows per card, random-routing imbalance, dispatch/combine bounds, overlap (§9.4.1, §9.4.3)."""

from __future__ import annotations

from harness.model.expert_plan_records import EpSkewPlan


def render_text(r: EpSkewPlan) -> str:
    ro = r.routing
    lines = [
        f"Scenario {r.head.scenario}  ({r.head.source})",
        f"  {ro.tokens} tokens × top-{ro.top_k} of {ro.n_experts} experts = {ro.assignments} assignments",
        f"  {'EP':>5s} {'hot card rows':>14s} {'mean':>8s} {'hot max/mean':>13s} {'random max/mean':>16s}",
    ]
    rand = {x.ep: x for x in r.random_routing}
    for h in r.hot_expert:
        x = rand[h.load.ep]
        lines.append(f"  {h.load.ep:5d} {h.load.hot_card_rows:14.1f} {h.load.mean_rows_per_card:8.1f} {h.load.max_over_mean:13.3f} "
                     f"{x.mean_max_over_mean:16.3f}")
    if r.random_routing:
        x = r.random_routing[0]
        lines.append(f"  (random routing: {x.batches} batches, seed {x.seed})")
    ex = r.exchange
    if ex:
        lines += ["", "Example 9.5 lower bounds (ms): dispatch, busiest-card compute, combine, barrier total"]
        for c in ex.cases:
            lines.append(f"  {c.name:38s} {c.dispatch.bound_s * 1e3:7.3f} {c.compute_s * 1e3:7.3f} "
                         f"{c.combine.bound_s * 1e3:7.3f} {c.barrier_total_s * 1e3:7.3f}   s_expert {c.s_expert:.2f}, "
                         f"dispatch set by {c.dispatch.limiter}")
    ov = r.overlap
    if ov:
        p, pad, tc = ov.pipeline, ov.padding, ov.token_completion
        lines += [
            "",
            f"Overlap of {ov.case!r} in {p.microbatches} micro-batches: {p.serial_s * 1e3:.3f} -> {p.pipelined_s * 1e3:.3f} ms; "
            f"cancelled by communication ×{p.communication_slowdown_to_cancel:.2f} or compute ×{p.compute_slowdown_to_cancel:.2f}",
            f"Padding {list(pad.rows_per_expert)} to {pad.tile_rows}: {pad.useful_rows} useful, {pad.padded_nonempty_rows} "
            f"(non-empty padded), {pad.padded_all_rows} (all padded)",
            f"Token completion: {[round(t * 1e3, 3) for t in tc.completion_s]} ms, batch barrier {tc.batch_barrier_s * 1e3:.3f} ms",
        ]
    return "\n".join(lines)
