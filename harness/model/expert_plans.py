"""What the §9.3–9.4 subcommands print: each scenario kind turned into one frozen record tree
(expert_plan_records.py) whose as_json is the JSON.

`harness model experts|af|ep-skew|replicas SCENARIO --json` print these; every field is documented
with its formula and section in docs/model-experts.md. Pure: scenario in, record out, no I/O.
"""

from __future__ import annotations

from harness.model import af_split, ep_skew, expert_capacity, expert_replicas, experts_cpu_gpu, moe_overlap, pipeline
from harness.model.expert_plan_records import (
    AfAtBandwidth,
    AfPlan,
    EpSkewPlan,
    ExchangeFigures,
    ExpertCapacityFigures,
    ExpertPath,
    ExpertPlanHead,
    ExpertsPlan,
    FreeMemoryCheck,
    HotCardFigures,
    LinkFigures,
    MlaCompactFigures,
    OverlapFigures,
    ReplicaCopy,
    ReplicasPlan,
    RoutingFigures,
    SplitSweepRow,
)
from harness.model.kv import kv_bytes, transfer_time_s, transfers_per_s
from harness.model.mla_compact_path import compact_path_d_pool_effect, compact_path_flops_per_token
from harness.model.stages import Efficiency, Workload, stage_rates
from harness.specs.cpus import get_cpu
from harness.specs.gpus import get_gpu
from harness.specs.links import get_link
from harness.specs.models import get_model
from harness.specs.scenario_experts import (
    AfSplitScenario,
    EpSkewScenario,
    ExpertReplicasScenario,
    ExpertsCpuGpuScenario,
)
from harness.units import DTYPE_BYTES


def _head(s) -> ExpertPlanHead:
    return ExpertPlanHead(s.name, s.kind, s.source)


def experts_plan(s: ExpertsCpuGpuScenario) -> ExpertsPlan:
    """Example 9.3 (both CPU kernels, both NUMA paths), the balance points, and §9.3.3 capacity and reuse."""
    model = get_model(s.expert.model)
    shape = experts_cpu_gpu.expert_shape(model, DTYPE_BYTES[s.expert.weight_dtype], DTYPE_BYTES[s.expert.activation_dtype])
    cpu = get_cpu(s.cpu.spec)
    gpu = get_gpu(s.gpu.spec)
    c_g = s.gpu.efficiency.compute * gpu.peak_bf16_flops_per_s
    b_h = s.gpu.efficiency.bandwidth * gpu.hbm_bandwidth_bytes_per_s
    paths = []
    for kernel in s.cpu.kernels:
        for numa in s.cpu.numa:
            hw = experts_cpu_gpu.ExpertHardware(
                cpu.flops_per_s(kernel), cpu.dram_bandwidth_bytes_per_s(numa), c_g, b_h, s.link.bandwidth, s.link.startup,
            )
            paths.append(ExpertPath(
                cpu_kernel=kernel,
                numa=numa,
                hardware=hw,
                cases=tuple(experts_cpu_gpu.batch_expert_times([m] * s.batch.experts, shape, hw) for m in s.batch.tokens_per_expert),
                crossover=experts_cpu_gpu.crossover_tokens(shape, hw),
                cpu_balance_tokens=experts_cpu_gpu.balance_tokens(shape, hw.cpu_flops_per_s, hw.dram_bandwidth_bytes_per_s),
            ))
    balance = {}
    for dt in s.capacity.balance_weight_dtypes:
        sh = experts_cpu_gpu.expert_shape(model, DTYPE_BYTES[dt], DTYPE_BYTES[s.expert.activation_dtype])
        balance[dt] = {
            f"{k}/{n}": experts_cpu_gpu.balance_tokens(sh, cpu.flops_per_s(k), cpu.dram_bandwidth_bytes_per_s(n))
            for k in s.cpu.kernels for n in s.cpu.numa
        }
    cap_gpu = get_gpu(s.capacity.gpu)
    free = max(0.0, cap_gpu.hbm_capacity_bytes - s.capacity.reserved_bytes)
    layers = model.n_moe_layers
    return ExpertsPlan(
        head=_head(s),
        model=model.name,
        expert=shape,
        cpu=cpu.name,
        gpu=gpu.name,
        link=LinkFigures(s.link.label, s.link.bandwidth, s.link.startup),
        paths=tuple(paths),
        balance_tokens=balance,
        capacity=ExpertCapacityFigures(
            gpu=cap_gpu.name,
            resident=tuple(expert_capacity.resident_expert_memory(shape.weight_bytes, model.n_routed_experts, r, layers, free)
                           for r in s.capacity.resident_per_layer),
            reuse=expert_capacity.batch_reuse(
                model.n_routed_experts, model.n_experts_per_token, s.capacity.batch_tokens, shape.params,
                shape.weight_bytes_per_param, cpu.local_dram_bandwidth_bytes_per_s,
            ),
        ),
    )


def af_plan(s: AfSplitScenario) -> AfPlan:
    """Example 9.4: AF step transfers, α* per state and bandwidth, whole request AF vs PD, the pipeline,
    and the compact MLA path's effect on the D pool."""
    m = get_model(s.af.model)
    b_a = DTYPE_BYTES[s.af.activation_dtype]
    alpha = s.af.startup_latency_s
    states = {name: kv_bytes(get_model(name), s.states.input_tokens, DTYPE_BYTES[s.states.kv_dtype]) for name in s.states.models}
    per_bw = []
    for bw in s.af.bandwidths_bytes_per_s:
        step = af_split.af_transfer(m, b_a, bw, alpha)
        per_bw.append(AfAtBandwidth(
            bandwidth_bytes_per_s=bw,
            decode_step=step,
            prefill_step=af_split.af_transfer(m, b_a, bw, alpha, tokens=s.af.prefill_tokens),
            requests=tuple(af_split.request_transfer(name, v, step, steps, bw, alpha)
                           for name, v in states.items() for steps in s.states.decode_steps),
        ))
    # exercise 9-4: the same total payload in one launch or in N launches, per startup latency
    sweep = []
    first_bw = s.af.bandwidths_bytes_per_s[0]
    n = 2 * m.n_layers
    for name, v in states.items():
        for a in s.af.startup_sweep_s:
            sweep.append(SplitSweepRow(name, v, a, first_bw, transfer_time_s(v, first_bw, a), n, transfer_time_s(v, first_bw, a, n)))
    return AfPlan(
        head=_head(s),
        model=m.name,
        states=states,
        per_bandwidth=tuple(per_bw),
        same_payload_split=tuple(sweep),
        pipeline=pipeline.pipeline_gain([s.pipeline.attention_s, s.pipeline.ffn_s], s.pipeline.microbatches),
        mla_compact_path=None if s.mla_compact_path is None else _mla_compact(s.mla_compact_path),
    )


def _mla_compact(c) -> MlaCompactFigures:
    stage_model = get_model(c.stage_model)
    state_model = get_model(c.state_model)
    kv_b = DTYPE_BYTES[c.kv_dtype]
    work = Workload(c.input_tokens, c.output_tokens, decode_batch=c.decode_batch, kv_bytes_per_elem=kv_b)
    eff = Efficiency.from_scenario(c.efficiency.compute, c.efficiency.bandwidth, "scenario mla_compact_path.efficiency")
    gpus = [p.gpu for p in c.pools]
    rates = [stage_rates(get_gpu(g), stage_model, work, eff) for g in gpus]
    state = kv_bytes(state_model, c.input_tokens, kv_b)
    link_rate = float("inf")
    if c.link is not None:
        ln = get_link(c.link)
        link_rate = transfers_per_s(state, ln.bandwidth_bytes_per_s, ln.startup_latency_s)
    flops = compact_path_flops_per_token(state_model)
    eff_flops = [eff.compute * get_gpu(g).peak_bf16_flops_per_s for g in gpus]
    effect = compact_path_d_pool_effect(
        gpus, [p.count for p in c.pools], [r.prefill_s_per_request for r in rates], [r.decode_s_per_request for r in rates],
        work.decode_calls, flops, eff_flops, c.arrival_rate_per_s, link_rate,
    )
    return MlaCompactFigures(state_model.name, state, c.link, link_rate, effect)


def ep_skew_plan(s: EpSkewScenario, batches: int | None = None, seed: int | None = None) -> EpSkewPlan:
    """§9.4.1 hot-expert rows per card, random-routing skew, example 9.5's table, and §9.4.3 overlap."""
    r = s.routing
    batches = r.batches if batches is None else batches
    seed = r.seed if seed is None else seed
    hot = []
    for ep in r.ep_sizes:
        h = ep_skew.hot_expert_card_load(r.tokens, r.top_k, r.n_experts, ep, r.hot_expert_rows)
        hot.append(HotCardFigures(
            h, h.hot_card_rows * r.row_bytes,
            ep_skew.card_exchange_s(h.hot_card_rows, r.row_bytes, r.card_bandwidth_bytes_per_s),
            ep_skew.card_exchange_s(h.mean_rows_per_card, r.row_bytes, r.card_bandwidth_bytes_per_s),
        ))
    rand = ep_skew.random_routing_skew(r.tokens, r.top_k, r.n_experts, r.ep_sizes, batches, seed)
    cases: dict[str, ep_skew.EpLayerBound] = {}
    exchange = overlap = None
    if s.exchange is not None:
        x = s.exchange
        model = get_model(x.model)
        shape = experts_cpu_gpu.expert_shape(model)
        c = x.compute_efficiency * get_gpu(x.gpu).peak_bf16_flops_per_s
        for case in x.cases:
            cuts = [ep_skew.Cut(k.name, k.bandwidth_bytes_per_s, None if k.mask is None else tuple(tuple(r_) for r_ in k.mask))
                    for k in case.cuts]
            bw = case.card_bandwidth
            cases[case.name] = ep_skew.ep_layer_bound(
                case.name, case.assignments,
                model.hidden_size * DTYPE_BYTES[case.dispatch_dtype], model.hidden_size * DTYPE_BYTES[case.combine_dtype],
                shape.flops_per_token, c, bw, bw, cuts, (x.sources, x.groups),
            )
        exchange = ExchangeFigures(model.name, x.gpu, c, shape.flops_per_token, tuple(cases.values()))
    if s.overlap is not None:
        o = s.overlap
        b = cases[o.case]
        overlap = OverlapFigures(
            case=o.case,
            padding=moe_overlap.padded_rows(o.padding_rows, o.tile_rows),
            pipeline=moe_overlap.overlap_gain(b.dispatch.bound_s, b.compute_s, b.combine.bound_s, o.microbatches),
            token_completion=moe_overlap.token_completion(o.token_branches_s, o.merge_s),
        )
    return EpSkewPlan(
        head=_head(s),
        routing=RoutingFigures(r.tokens, r.top_k, r.n_experts, r.tokens * r.top_k, r.tokens * r.top_k / r.n_experts),
        hot_expert=tuple(hot),
        random_routing=tuple(rand),
        exchange=exchange,
        overlap=overlap,
    )


def replicas_plan(s: ExpertReplicasScenario) -> ReplicasPlan:
    """Example 9.6: saving per batch, copy time per link, payback, net gain, feasibility, memory budget."""
    h = s.hot
    model = get_model(h.model)
    gpu = get_gpu(h.gpu)
    shape = expert_replicas.TiledExpertShape(
        model.hidden_size, model.moe_intermediate_size, DTYPE_BYTES[h.weight_dtype], DTYPE_BYTES[h.activation_dtype], h.tile_m, h.tile_n,
    )
    c = h.efficiency.compute * gpu.peak_bf16_flops_per_s
    b = h.efficiency.bandwidth * gpu.hbm_bandwidth_bytes_per_s
    plan = expert_replicas.plan_replicas(h.expert_rows, h.replicas, shape, c, b, h.free_bytes_per_receiver)
    copies = []
    for cp in s.copies:
        t = expert_replicas.copy_time_s(plan.replicas, shape.weight_bytes, cp.bandwidth, cp.startup)
        copies.append(ReplicaCopy(
            name=cp.name, link=cp.link, bandwidth_bytes_per_s=cp.bandwidth, startup_latency_s=cp.startup, copy_s=t,
            payback_batches=expert_replicas.payback_batches(t, plan.saving_per_batch_s) if plan.feasible else None,
            net_gain_s={str(n): expert_replicas.net_gain_s(n, t, plan.saving_per_batch_s) for n in s.horizons_batches},
        ))
    checks = []
    for free in s.free_bytes_checks:
        p = expert_replicas.plan_replicas(h.expert_rows, h.replicas, shape, c, b, free)
        checks.append(FreeMemoryCheck(free, p.feasible, p.reason))
    pool = None
    if s.pool is not None:
        cards = plan.after
        pool = expert_replicas.pool_stability(
            s.pool.batches_per_s, [x.flops for x in cards], [c] * len(cards),
            [x.hbm_bytes for x in cards], [b] * len(cards),
        )
    return ReplicasPlan(
        head=_head(s),
        model=model.name,
        gpu=gpu.name,
        card_flops_per_s=c,
        card_hbm_bytes_per_s=b,
        expert_bytes=shape.weight_bytes,
        activation_bytes_per_row=shape.activation_bytes_per_row,
        plan=plan,
        copies=tuple(copies),
        free_memory_checks=tuple(checks),
        memory_budget={
            str(layers): expert_replicas.replica_memory_bytes(layers, s.memory_budget.replicas_per_layer, shape.weight_bytes)
            for layers in s.memory_budget.layers
        },
        pool=pool,
    )
