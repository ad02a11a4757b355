"""Text summary of `harness model kv`: KV tiers of a scenario: fetch per tier, retention, keep/fetch/recompute, prefetch, SSD budget, pages, eviction (§9.5.2–9.5.3, §9.7.1)."""

from __future__ import annotations

import math

from harness.model.kv_plan_records import KvTiersPlan
from harness.report.plans._format import ms_or_na as _ms
from harness.units import fmt_num


def _gb(x: float | None) -> str:
    return fmt_num(x, ".1f", 1e-9, " GB", missing="unbounded")


def render_text(r: KvTiersPlan) -> str:
    c = r.compute
    lines = [
        f"Scenario {r.head.scenario}  ({r.head.source})",
        f"  {c.model} on {c.gpu}: prefix {r.prefix_tokens} tokens = {r.state_bytes / 2**30:.3f} GiB, "
        f"recompute {_ms(r.recompute_s)}, KV production r = {r.kv_production_bytes_per_s / 1e9:.2f} GB/s",
        "",
        f"Tiers per GPU of {r.server} (§9.5.2):",
        f"  {'tier':7s} {'capacity':>12s} {'fetch':>10s} {'retention C/r':>14s} {'prefixes':>9s}",
    ]
    for tier in r.tiers:
        t = tier.fetch
        ret = "unbounded" if math.isinf(t.retention_s) else f"{t.retention_s:.0f} s"
        fit = "-" if t.prefixes_that_fit is None else str(t.prefixes_that_fit)
        cap = None if math.isinf(t.capacity_bytes) else t.capacity_bytes
        lines.append(f"  {t.tier:7s} {_gb(cap):>12s} {_ms(t.fetch_s):>10s} {ret:>14s} {fit:>9s}")
    for i in r.reuse_intervals:
        lines.append(f"  reuse interval {i.interval_s:g} s needs C = rT = {_gb(i.capacity_bytes)} -> tiers {', '.join(i.tiers_needed) or 'none suffices'}")
    if r.blocks:
        b = r.blocks
        lines.append(f"  {b.count} blocks of {b.tokens_per_block} tokens = {b.bytes / 1e12:.2f} TB")
    u = r.reuse
    d = u.decision
    lines += [
        "",
        f"Keep or recompute over {u.link} (§9.5.2): write + read {_ms(d.keep_s)} vs recompute {_ms(d.recompute_total_s)}; "
        f"critical bandwidth {u.critical_bandwidth_bytes_per_s / 1e9:.2f} GB/s (k=1: {u.critical_bandwidth_by_uses[0].critical_bandwidth_bytes_per_s / 1e9:.2f} GB/s)",
    ]
    for sl in u.slow_links:
        lines.append(f"  {sl.link}: one fetch {_ms(sl.fetch_s)}; keep wins: {sl.decision.keep_wins}")
    sd = u.ssd
    lines.append(f"  SSD: write {_ms(sd.write_s)} + read {_ms(sd.read_s)} = {_ms(sd.decision.keep_s)}")
    for st in u.states:
        lines.append(f"  {st.model} ({st.attention}): {st.state_bytes / 2**20:.0f} MiB, fetch {_ms(st.fetch_s)}, "
                     f"remote reads busy {st.remote_reads_link_busy_s:.2f} s, need {st.remote_reads_bandwidth_bytes_per_s / 1e9:.1f} GB/s "
                     f"({st.remote_reads_oversubscription:.1f}× the link)")
    p = r.prefetch
    lines += [
        "",
        f"Layer-wise prefetch (§9.5.2): read-then-compute {_ms(p.read_then_compute.total_s)}, per-layer {_ms(p.per_layer.total_s)}, "
        f"{p.layers_to_preload_used} layers pre-loaded ({p.buffer_bytes / 1e6:.0f} MB buffer) {_ms(p.pre_loaded.total_s)}"
        + ("" if p.layers_to_preload_used == p.layers_to_preload else
           f" (the closed formula's {p.layers_to_preload} leave the read exposed: the last layer's compute cannot overlap its own read)"),
    ]
    for t in p.tiers:
        lines.append(f"  {t.tier:7s} read {_ms(t.read_s)}, {_ms(t.read_per_layer_s)}/layer, per-layer total {_ms(t.per_layer_total_s)}, "
                     f"hidden from {t.hiding_new_tokens} new tokens")
    lines.append(f"  host memory stages {p.host_prefixes_to_stage} queued prefixes")
    for b in r.ssd_budget:
        lines.append(f"SSD budget at prefix hit {b.prefix_hit_rate:.0%}: {b.endurance_write_bytes_per_s / 1e6:.1f} MB/s, "
                     f"{b.overrun_factor:.1f}× over, admit {b.admissible_fraction:.1%} of new KV")
    pg = r.pages
    lines.append(f"Pages (§9.5.3): {pg.layout.page_bytes / 2**20:.2f} MiB = {pg.layout.segments_per_page} × "
                 f"{pg.layout.segment_bytes / 1024:.0f} KiB; read {pg.reuse.pages_read}, used {pg.reuse.pages_used}; "
                 f"missing page after {pg.missing_page.waited_s:g} s: {pg.missing_page.action}")
    if r.eviction:
        e = r.eviction
        lines.append(f"Eviction on {e.requests} requests of {e.sessions} sessions:")
        for name, x in e.policies.items():
            lines.append(f"  {name:12s} hit rate {x.hit_rate:.1%}, from host {x.host_hit_share:.1%}")
    if r.handoff:
        h = r.handoff
        lines.append(f"Hand-off (§9.7.1): direct {_ms(h.direct_s)}, pooled {_ms(h.pooled_s)}, net saving with "
                     f"{h.later_reuses} later reuse(s) {_ms(h.net_saving_s)}")
    return "\n".join(lines)
