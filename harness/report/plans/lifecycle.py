"""Text summary of `harness model lifecycle`: Instance lifecycle of a scenario: graph-capture break-even, migration catch-up, reconfiguration, recovery (§9.6)."""

from __future__ import annotations

from harness.model.kv_plan_records import LifecyclePlan


def render_text(r: LifecyclePlan) -> str:
    lines = [f"Scenario {r.head.scenario}  ({r.head.source})"]
    if r.graph_capture:
        g = r.graph_capture
        lines.append(f"Graph capture (§9.6.1): break-even after {g.break_even_steps:,.0f} steps "
                     f"({g.break_even_tokens / 1e6:.2f} M tokens), net positive from step {g.first_net_positive_step:,}")
    if r.migration:
        m = r.migration
        lines.append(f"Migration (§9.6.2): {m.state_bytes / 1e9:.1f} GB growing {m.growth_bytes_per_s / 1e9:.3f} GB/s")
        for x in m.links:
            c = x.catch_up
            t = "never (link ≤ growth)" if c.catch_up_s is None else f"{c.catch_up_s:.2f} s (+{c.added_bytes / 1e9:.2f} GB)"
            lines.append(f"  over {x.link}: catch up in {t}")
    if r.reconfiguration:
        rc = r.reconfiguration
        lines.append(f"Reconfiguration (§9.6.2), {rc.serial_prep_s:g} s serial preparation:")
        for p in rc.paths:
            t = p.time
            lines.append(f"  {t.name:22s} {t.payload_bytes / 1e9:5.1f} GB in {t.transfer_s:.3f} s -> total {t.total_s:.2f} s")
    if r.recovery:
        for case in r.recovery.plans:
            p = case.plan
            lines.append(f"Recovery (§9.6.3) from a KV checkpoint of {p.kv_checkpoint_tokens} tokens: replay {p.replay_tokens} tokens "
                         f"({case.replay_s * 1e3:.1f} ms) to rebuild {p.context_to_rebuild_tokens}, resample {p.resample_tokens}")
    return "\n".join(lines)
