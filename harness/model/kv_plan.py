"""Run the §9.5–9.6 and §9.7.1 calculators on a scenario of kind "kv-tiers", "cache-routing" or
"lifecycle"; each returns a frozen record tree (kv_plan_records.py) whose as_json is what `--json`
prints (fields in docs/model-kv.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.model import cache_routing as cr
from harness.model import kv_eviction, kv_pages, kv_prefetch, kv_reuse, kv_tiers, lifecycle
from harness.model.forward import param_counts
from harness.model.handoff import handoff_comparison
from harness.model.kv import kv_byte_seconds, kv_bytes, kv_bytes_per_token
from harness.model.kv_plan_records import (
    BlocksFigures,
    InvalidationFigures,
    LinkLoadFigures,
    RoutingPlan,
    SerialExample,
    StateRestoreFigures,
    TieBandwidths,
    ComputeFigures,
    EvictionFigures,
    KvTiersPlan,
    PagesFigures,
    PrefetchAtNewTokens,
    PrefetchFigures,
    PrefetchTier,
    ReuseFigures,
    SlowLink,
    SsdKeep,
    StateFigures,
    TierFigures,
    LifecyclePlan,
    MigrationOverLink,
    MigrationPlan,
    PlanHead,
    ReconfigurationPath,
    ReconfigurationPlan,
    RecoveryCase,
    RecoveryPlans,
)
from harness.model.stages import Efficiency, Workload, stage_rates
from harness.specs.gpus import GpuSpec, get_gpu
from harness.specs.links import get_link
from harness.specs.models import ModelSpec, get_model
from harness.specs.scenario_kv import CacheRoutingScenario, ComputeSpec, KvTiersScenario, LifecycleScenario
from harness.specs.storage import get_server, get_ssd, per_gpu_tiers
from harness.units import DTYPE_BYTES


@dataclass(frozen=True, slots=True)
class _Compute:
    """A model on a GPU at an efficiency: prefill time of n new tokens after c cached ones (§9.2.3 roofline)."""

    model: ModelSpec
    gpu: GpuSpec
    eff: Efficiency
    weight_bytes_per_param: float
    kv_bytes_per_elem: float

    @classmethod
    def of(cls, c: ComputeSpec) -> "_Compute":
        e = c.efficiency
        eff = Efficiency.from_scenario(e.compute, e.bandwidth, "scenario efficiency")
        return cls(get_model(c.model), get_gpu(c.gpu), eff, DTYPE_BYTES[c.weight_dtype], DTYPE_BYTES[c.kv_dtype])

    def prefill_s(self, new_tokens: int, cached_tokens: int = 0) -> float:
        w = Workload(cached_tokens + new_tokens, 1, cached_tokens, 1, self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return stage_rates(self.gpu, self.model, w, self.eff).prefill_s_per_request

    def kv_bytes(self, tokens: int) -> float:
        return kv_bytes(self.model, tokens, self.kv_bytes_per_elem)

    @property
    def weight_bytes(self) -> float:
        return param_counts(self.model).total * self.weight_bytes_per_param

    def figures(self) -> ComputeFigures:
        return ComputeFigures(self.model.name, self.gpu.name, self.eff, self.weight_bytes,
                              kv_bytes_per_token(self.model, self.kv_bytes_per_elem))


def _plan_head(s: Any) -> PlanHead:
    return PlanHead(s.name, s.kind, s.source, s.description)


def kv_tiers_plan(s: KvTiersScenario) -> KvTiersPlan:
    """Tiers, retention, keep/fetch/recompute, prefetch, SSD budget, pages, eviction and hand-off (§9.5.2–9.5.3, §9.7.1)."""
    c = _Compute.of(s.compute)
    server = get_server(s.server)
    ssd = get_ssd(server.ssd)
    V = c.kv_bytes(s.prefix_tokens)
    recompute_s = c.prefill_s(s.prefix_tokens)
    r = kv_tiers.kv_production_rate_bytes_per_s(V, recompute_s)
    tiers = per_gpu_tiers(server, c.weight_bytes)
    by_name = {t.name: t for t in tiers}
    fetches = kv_tiers.tier_fetches(tiers, V, recompute_s, r)
    fetch_s = {f.tier: f.fetch_s for f in fetches}
    blocks = None
    if s.blocks:
        blocks = BlocksFigures(s.blocks.count, s.blocks.tokens_per_block, kv_tiers.blocks_bytes(
            s.blocks.count, s.blocks.tokens_per_block, kv_bytes_per_token(c.model, c.kv_bytes_per_elem)))

    # keep / fetch / recompute (§9.5.2)
    link = get_link(s.reuse.link)
    B = link.bandwidth_bytes_per_s
    t_link = V / B
    slow = []
    for name in s.reuse.slow_links:
        b = get_link(name).bandwidth_bytes_per_s
        slow.append(SlowLink(name, b, V / b, kv_reuse.keep_or_recompute(V / b, V / b, recompute_s)))
    ssd_w, ssd_r = V / ssd.seq_write_bytes_per_s, V / ssd.seq_read_bytes_per_s
    states = []
    for m in [c.model.name, *s.compare_models]:
        mm = get_model(m)
        v = kv_bytes(mm, s.prefix_tokens, c.kv_bytes_per_elem)
        reads = s.reuse.remote_reads * v
        states.append(StateFigures(
            model=mm.name, attention=mm.attention, state_bytes=v, fetch_s=v / B, write_plus_read_s=2 * v / B,
            remote_reads_link_busy_s=reads / B, remote_reads_bandwidth_bytes_per_s=reads / s.reuse.deadline_s,
            remote_reads_oversubscription=reads / s.reuse.deadline_s / B,
            resident_byte_seconds=kv_byte_seconds(v, s.reuse.resident_s),
        ))
    reuse = ReuseFigures(
        link=link.name,
        link_bandwidth_bytes_per_s=B,
        decision=kv_reuse.keep_or_recompute(t_link, t_link, recompute_s),
        critical_bandwidth_bytes_per_s=kv_reuse.critical_bandwidth_bytes_per_s(V, recompute_s),
        critical_bandwidth_by_uses=tuple(kv_reuse.reuse_band(V, recompute_s, s.reuse.max_uses)),
        slow_links=tuple(slow),
        ssd=SsdKeep(ssd_w, ssd_r, kv_reuse.keep_or_recompute(ssd_w, ssd_r, recompute_s)),
        usage_modes=tuple(kv_reuse.usage_modes(V, s.reuse.remote_reads, B, recompute_s, s.reuse.deadline_s, s.reuse.resident_s)),
        states=tuple(states),
    )

    # layer-wise prefetch (§9.5.2, Fig. 9-32 – 9-34)
    host_B = by_name["host"].fetch_hops[0].bandwidth_bytes_per_s
    n_layers = c.model.n_layers
    layer_bytes = V / n_layers
    t_new = c.prefill_s(s.new_tokens, s.prefix_tokens)
    t_host = fetch_s["host"]
    buf = kv_prefetch.prefetch_buffer_bytes(host_B, t_host, t_new)
    p_closed = kv_prefetch.layers_to_preload(buf, layer_bytes)
    p_sim = kv_prefetch.min_preloaded_layers(n_layers, t_host, t_new)
    p_used = kv_prefetch.layers_that_hide_the_read(n_layers, t_host, t_new, p_closed)

    def new_s(n: int) -> float:
        return c.prefill_s(n, s.prefix_tokens)

    per_tier = []
    for name in ("host", "remote", "ssd"):
        t = fetch_s[name]
        per_tier.append(PrefetchTier(
            tier=name, read_s=t, read_per_layer_s=t / n_layers,
            per_layer_total_s=kv_prefetch.layer_pipeline(n_layers, t, t_new).total_s,
            hiding_new_tokens=kv_prefetch.hiding_new_tokens(t, new_s, s.prefetch.max_hiding_tokens),
            queue_wait_to_stage_in_host_s=0.0 if name == "host" else t,
        ))
    extra = []
    for n in s.prefetch.new_tokens:
        tn = new_s(n)
        b = kv_prefetch.prefetch_buffer_bytes(host_B, t_host, tn)
        closed = kv_prefetch.layers_to_preload(b, layer_bytes)
        extra.append(PrefetchAtNewTokens(n, tn, kv_prefetch.layer_pipeline(n_layers, t_host, tn).total_s, b, closed,
                                         kv_prefetch.layers_that_hide_the_read(n_layers, t_host, tn, closed)))
    prefetch = PrefetchFigures(
        layer_bytes=layer_bytes,
        compute_s=t_new,
        compute_per_layer_s=t_new / n_layers,
        host_read_s=t_host,
        read_then_compute=kv_prefetch.read_then_compute(n_layers, t_host, t_new),
        per_layer=kv_prefetch.layer_pipeline(n_layers, t_host, t_new),
        buffer_bytes=buf,
        layers_to_preload=p_closed,
        layers_to_preload_simulated=p_sim,
        layers_to_preload_used=p_used,
        pre_loaded=kv_prefetch.layer_pipeline(n_layers, t_host, t_new, p_used),
        tiers=tuple(per_tier),
        new_tokens=tuple(extra),
        host_prefixes_to_stage=kv_tiers.prefixes_that_fit(by_name["host"].capacity_bytes, V),
    )

    # pages (§9.5.3)
    pg = s.pages
    layout = kv_pages.page_layout(c.model, pg.tokens_per_page, c.kv_bytes_per_elem)
    pages = PagesFigures(
        layout=layout,
        reuse=kv_pages.reusable_prefix(pg.prompt_tokens, pg.tokens_per_page, layout.page_bytes,
                                       kv_pages.contiguous_pages(pg.pages_read, pg.missing_page_index)),
        missing_page=kv_pages.missing_page_decision(pg.waited_s, recompute_s, pg.expected_remaining_wait_s),
    )

    eviction = None
    if s.eviction:
        e = s.eviction
        trace = e.trace or kv_eviction.multi_turn_trace(e.sessions, e.turns_per_session, e.active_sessions, e.seed)
        res = kv_eviction.compare_policies(trace, e.host_slots, e.ssd_slots, -1 if e.lookahead is None else e.lookahead)
        eviction = EvictionFigures("explicit" if e.trace else "generated", len(trace), len(set(trace)), res)
    handoff = None
    if s.handoff:
        h = s.handoff
        handoff = handoff_comparison(
            V, get_link(h.direct_link).bandwidth_bytes_per_s, get_link(h.pool_write_link).bandwidth_bytes_per_s,
            get_link(h.pool_read_link).bandwidth_bytes_per_s, recompute_s, h.later_reuses,
        )
    return KvTiersPlan(
        head=_plan_head(s),
        compute=c.figures(),
        server=server.name,
        prefix_tokens=s.prefix_tokens,
        new_tokens=s.new_tokens,
        state_bytes=V,
        recompute_s=recompute_s,
        kv_production_bytes_per_s=r,
        tiers=tuple(TierFigures(f, t.fetch_hops, t.write_bandwidth_bytes_per_s, t.source) for t, f in zip(tiers, fetches)),
        reuse_intervals=tuple(kv_tiers.interval_capacity(tiers, r, T) for T in s.retention.reuse_intervals_s),
        blocks=blocks,
        reuse=reuse,
        prefetch=prefetch,
        ssd_budget=tuple(kv_tiers.ssd_write_budget(ssd, r, h, host_B) for h in s.ssd_budget.prefix_hit_rates),
        pages=pages,
        eviction=eviction,
        handoff=handoff,
    )


def routing_plan(s: CacheRoutingScenario) -> RoutingPlan:
    """Example 9.7: the paths, tie bandwidths, uncertain hits, fetch link load and the affinity threshold (§9.5.4)."""
    c = _Compute.of(s.compute)
    V = c.kv_bytes(s.prefix_tokens)
    c_hit = c.prefill_s(s.new_tokens, s.prefix_tokens)
    c_full = c.prefill_s(s.prefix_tokens + s.new_tokens)
    host = get_link(s.fetch.host_link)
    fixed = s.fetch.lookup_s + V / host.bandwidth_bytes_per_s
    paths = [
        cr.route_path("local-hit", "holder", s.holder_queue_s, 0.0, c_hit),
        cr.route_path("recompute", "free", s.free_queue_s, 0.0, c_full),
    ]
    for name in s.fetch.remote_links:
        ready = kv_tiers.serial_fetch_time_s(V, [get_link(name).bandwidth_bytes_per_s, host.bandwidth_bytes_per_s], s.fetch.lookup_s)
        paths.append(cr.route_path(f"fetch-{name}", "free", s.free_queue_s, ready, c_hit))
    best = min(paths, key=lambda p: p.t_first_s)
    serial = invalidation = link_load = restore = None
    if s.serial_example:
        e = s.serial_example
        serial = SerialExample(cr.t_first_s(e.queue_s, e.fetch_s, e.compute_s, True), cr.t_first_s(e.queue_s, e.fetch_s, e.compute_s, False))
    if s.invalidation:
        inv = s.invalidation
        hit_s = cr.t_first_s(inv.holder_queue_s, 0.0, c_hit)
        miss_s = cr.t_first_s(inv.holder_queue_s, 0.0, c_full)
        alt = paths[1].t_first_s
        invalidation = InvalidationFigures(
            hit_s=hit_s, miss_s=miss_s, alternative_s=alt,
            min_hit_probability_for_mean=cr.min_hit_probability_for_mean(hit_s, miss_s, alt),
            target_s=inv.target_s,
            min_hit_probability_for_quantile=(
                None if inv.target_s is None else cr.min_hit_probability_for_quantile(hit_s, miss_s, inv.target_s, inv.quantile)),
            by_probability=tuple(cr.two_point_ttft(hit_s, miss_s, p, inv.quantile) for p in inv.hit_probabilities),
        )
    if s.link_load:
        link_load = LinkLoadFigures(
            cr.fetch_link_load(s.link_load.fetches_per_s, V, get_link(s.link_load.link).bandwidth_bytes_per_s), s.link_load.link)
    if s.state_restore:
        st = s.state_restore
        steps = list(st.prep_steps_s.values())
        restore = StateRestoreFigures(
            prep_steps_s=dict(st.prep_steps_s),
            threshold_s=cr.affinity_threshold_s(steps, st.free_instance_queue_s),
            choices=tuple(cr.affinity_choice(w, steps, st.free_instance_queue_s) for w in st.holder_waits_s),
            source=st.source,
        )
    return RoutingPlan(
        head=_plan_head(s),
        compute=c.figures(),
        prefix_tokens=s.prefix_tokens,
        new_tokens=s.new_tokens,
        state_bytes=V,
        hit_compute_s=c_hit,
        full_compute_s=c_full,
        fetch_fixed_s=fixed,
        paths=tuple(paths),
        best_path=best.name,
        tie_bandwidth_bytes_per_s=TieBandwidths(
            cr.fetch_tie_bandwidth_bytes_per_s(paths[0].t_first_s, s.free_queue_s, c_hit, V, fixed),
            cr.fetch_tie_bandwidth_bytes_per_s(paths[1].t_first_s, s.free_queue_s, c_hit, V, fixed),
        ),
        serial_example=serial,
        invalidation=invalidation,
        link_load=link_load,
        state_restore=restore,
    )


def lifecycle_plan(s: LifecycleScenario) -> LifecyclePlan:
    """Graph-capture break-even, migration catch-up, reconfiguration and recovery (§9.6)."""
    graph = migration = reconfiguration = recovery = None
    if s.graph_capture:
        g = s.graph_capture
        graph = lifecycle.graph_capture_break_even(g.extra_startup_s, g.saving_per_step_s, g.batch)
    if s.migration:
        m = s.migration
        c = _Compute.of(m.compute)
        w = Workload(m.input_tokens, m.output_tokens, 0, m.decode_batch, c.weight_bytes_per_param, c.kv_bytes_per_elem)
        rates = stage_rates(c.gpu, c.model, w, c.eff)
        state = rates.decode_step.kv_read_bytes  # batch × mean context × KV/token
        growth = lifecycle.decode_growth_bytes_per_s(rates.decode_calls_per_s, kv_bytes_per_token(c.model, c.kv_bytes_per_elem))
        migration = MigrationPlan(
            compute=c.figures(),
            decode_batch=m.decode_batch,
            mean_context_tokens=w.mean_context_tokens,
            decode_calls_per_s=rates.decode_calls_per_s,
            state_bytes=state,
            growth_bytes_per_s=growth,
            links=tuple(MigrationOverLink(lifecycle.migration_catch_up(state, growth, get_link(n).bandwidth_bytes_per_s), n)
                        for n in m.links),
        )
    if s.reconfiguration:
        rc = s.reconfiguration
        weights = param_counts(get_model(rc.model)).total * DTYPE_BYTES[rc.weight_dtype]
        rows = [lifecycle.reconfiguration_time(p.name, p.payload_bytes if p.payload_bytes is not None else weights,
                                               get_link(p.link).bandwidth_bytes_per_s, rc.serial_prep_s) for p in rc.paths]
        first = rows[0].total_s
        reconfiguration = ReconfigurationPlan(
            model=rc.model,
            weight_bytes=weights,
            serial_prep_s=rc.serial_prep_s,
            paths=tuple(ReconfigurationPath(r, p.link, 1 - r.total_s / first if first else 0.0) for r, p in zip(rows, rc.paths)),
        )
    if s.recovery:
        rv = s.recovery
        c = _Compute.of(rv.compute)
        cases = []
        for ck in rv.kv_checkpoint_tokens:
            p = lifecycle.recovery_plan(rv.input_tokens, rv.delivered_output_tokens, rv.logged_output_tokens, ck)
            cases.append(RecoveryCase(p, c.prefill_s(p.replay_tokens, ck) if p.replay_tokens else 0.0))
        recovery = RecoveryPlans(c.figures(), tuple(cases))
    return LifecyclePlan(_plan_head(s), graph, migration, reconfiguration, recovery)
