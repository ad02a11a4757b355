"""What the §9.3–9.4 subcommands print: each scenario kind turned into one dict of named results.

`harness model experts|af|ep-skew|replicas SCENARIO --json` print these; every field is documented
with its formula and section in docs/model-experts.md. Pure: scenario in, dict out, no I/O.
"""

from __future__ import annotations

from typing import Any

from harness.model import af_split, ep_skew, expert_capacity, expert_replicas, experts_cpu_gpu, moe_overlap, pipeline
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


def _head(s) -> dict[str, Any]:
    return {"scenario": s.name, "kind": s.kind, "source": s.source}


def experts_plan(s: ExpertsCpuGpuScenario) -> dict[str, Any]:
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
            cross = experts_cpu_gpu.crossover_tokens(shape, hw)
            paths.append({
                "cpu_kernel": kernel,
                "numa": numa,
                "hardware": hw.to_dict(),
                "cases": [
                    experts_cpu_gpu.batch_expert_times([m] * s.batch.experts, shape, hw).to_dict()
                    for m in s.batch.tokens_per_expert
                ],
                "crossover": None if cross is None else cross.to_dict(),
                "cpu_balance_tokens": experts_cpu_gpu.balance_tokens(shape, hw.cpu_flops_per_s, hw.dram_bandwidth_bytes_per_s),
            })
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
    return {
        **_head(s),
        "model": model.name,
        "expert": shape.to_dict(),
        "cpu": cpu.name,
        "gpu": gpu.name,
        "link": {"label": s.link.label, "bandwidth_bytes_per_s": s.link.bandwidth, "startup_latency_s": s.link.startup},
        "paths": paths,
        "balance_tokens": balance,
        "capacity": {
            "gpu": cap_gpu.name,
            "resident": [
                expert_capacity.resident_expert_memory(shape.weight_bytes, model.n_routed_experts, r, layers, free).to_dict()
                for r in s.capacity.resident_per_layer
            ],
            "reuse": expert_capacity.batch_reuse(
                model.n_routed_experts, model.n_experts_per_token, s.capacity.batch_tokens, shape.params,
                shape.weight_bytes_per_param, cpu.local_dram_bandwidth_bytes_per_s,
            ).to_dict(),
        },
    }


def af_plan(s: AfSplitScenario) -> dict[str, Any]:
    """Example 9.4: AF step transfers, α* per state and bandwidth, whole request AF vs PD, the pipeline,
    and the compact MLA path's effect on the D pool."""
    m = get_model(s.af.model)
    b_a = DTYPE_BYTES[s.af.activation_dtype]
    alpha = s.af.startup_latency_s
    states = {name: kv_bytes(get_model(name), s.states.input_tokens, DTYPE_BYTES[s.states.kv_dtype]) for name in s.states.models}
    per_bw = []
    for bw in s.af.bandwidths_bytes_per_s:
        step = af_split.af_transfer(m, b_a, bw, alpha)
        per_bw.append({
            "bandwidth_bytes_per_s": bw,
            "decode_step": step.to_dict(),
            "prefill_step": af_split.af_transfer(m, b_a, bw, alpha, tokens=s.af.prefill_tokens).to_dict(),
            "requests": [
                af_split.request_transfer(name, v, step, steps, bw, alpha).to_dict()
                for name, v in states.items() for steps in s.states.decode_steps
            ],
        })
    # exercise 9-4: the same total payload in one launch or in N launches, per startup latency
    sweep = []
    first_bw = s.af.bandwidths_bytes_per_s[0]
    n = 2 * m.n_layers
    for name, v in states.items():
        for a in s.af.startup_sweep_s:
            sweep.append({
                "state": name, "state_bytes": v, "startup_latency_s": a, "bandwidth_bytes_per_s": first_bw,
                "one_transfer_s": transfer_time_s(v, first_bw, a),
                "split_transfers": n,
                "split_s": transfer_time_s(v, first_bw, a, n),
            })
    out: dict[str, Any] = {
        **_head(s),
        "model": m.name,
        "states": states,
        "per_bandwidth": per_bw,
        "same_payload_split": sweep,
        "pipeline": pipeline.pipeline_gain([s.pipeline.attention_s, s.pipeline.ffn_s], s.pipeline.microbatches).to_dict(),
        "mla_compact_path": None,
    }
    if s.mla_compact_path is not None:
        out["mla_compact_path"] = _mla_compact(s.mla_compact_path)
    return out


def _mla_compact(c) -> dict[str, Any]:
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
    return {"state_model": state_model.name, "state_bytes": state, "link": c.link, "link_requests_per_s": link_rate, **effect.to_dict()}


def ep_skew_plan(s: EpSkewScenario, batches: int | None = None, seed: int | None = None) -> dict[str, Any]:
    """§9.4.1 hot-expert rows per card, random-routing skew, example 9.5's table, and §9.4.3 overlap."""
    r = s.routing
    batches = r.batches if batches is None else batches
    seed = r.seed if seed is None else seed
    hot = []
    for ep in r.ep_sizes:
        h = ep_skew.hot_expert_card_load(r.tokens, r.top_k, r.n_experts, ep, r.hot_expert_rows)
        hot.append({
            **h.to_dict(),
            "hot_card_receive_bytes": h.hot_card_rows * r.row_bytes,
            "hot_card_receive_s": ep_skew.card_exchange_s(h.hot_card_rows, r.row_bytes, r.card_bandwidth_bytes_per_s),
            "mean_card_receive_s": ep_skew.card_exchange_s(h.mean_rows_per_card, r.row_bytes, r.card_bandwidth_bytes_per_s),
        })
    rand = ep_skew.random_routing_skew(r.tokens, r.top_k, r.n_experts, r.ep_sizes, batches, seed)
    out: dict[str, Any] = {
        **_head(s),
        "routing": {"tokens": r.tokens, "top_k": r.top_k, "n_experts": r.n_experts, "assignments": r.tokens * r.top_k,
                    "mean_rows_per_expert": r.tokens * r.top_k / r.n_experts},
        "hot_expert": hot,
        "random_routing": [x.to_dict() for x in rand],
        "exchange": None,
        "overlap": None,
    }
    cases: dict[str, ep_skew.EpLayerBound] = {}
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
        out["exchange"] = {
            "model": model.name, "gpu": x.gpu, "group_flops_per_s": c, "flops_per_assignment": shape.flops_per_token,
            "cases": [b.to_dict() for b in cases.values()],
        }
    if s.overlap is not None:
        o = s.overlap
        b = cases[o.case]
        out["overlap"] = {
            "case": o.case,
            "padding": moe_overlap.padded_rows(o.padding_rows, o.tile_rows).to_dict(),
            "pipeline": moe_overlap.overlap_gain(b.dispatch.bound_s, b.compute_s, b.combine.bound_s, o.microbatches).to_dict(),
            "token_completion": moe_overlap.token_completion(o.token_branches_s, o.merge_s).to_dict(),
        }
    return out


def replicas_plan(s: ExpertReplicasScenario) -> dict[str, Any]:
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
        copies.append({
            "name": cp.name, "link": cp.link, "bandwidth_bytes_per_s": cp.bandwidth, "startup_latency_s": cp.startup,
            "copy_s": t,
            "payback_batches": expert_replicas.payback_batches(t, plan.saving_per_batch_s) if plan.feasible else None,
            "net_gain_s": {str(n): expert_replicas.net_gain_s(n, t, plan.saving_per_batch_s) for n in s.horizons_batches},
        })
    checks = []
    for free in s.free_bytes_checks:
        p = expert_replicas.plan_replicas(h.expert_rows, h.replicas, shape, c, b, free)
        checks.append({"free_bytes_per_receiver": free, "feasible": p.feasible, "reason": p.reason})
    out: dict[str, Any] = {
        **_head(s),
        "model": model.name,
        "gpu": gpu.name,
        "card_flops_per_s": c,
        "card_hbm_bytes_per_s": b,
        "expert_bytes": shape.weight_bytes,
        "activation_bytes_per_row": shape.activation_bytes_per_row,
        "plan": plan.to_dict(),
        "copies": copies,
        "free_memory_checks": checks,
        "memory_budget": {
            str(layers): expert_replicas.replica_memory_bytes(layers, s.memory_budget.replicas_per_layer, shape.weight_bytes)
            for layers in s.memory_budget.layers
        },
        "pool": None,
    }
    if s.pool is not None:
        cards = plan.after
        out["pool"] = expert_replicas.pool_stability(
            s.pool.batches_per_s, [x.flops for x in cards], [c] * len(cards),
            [x.hbm_bytes for x in cards], [b] * len(cards),
        ).to_dict()
    return out
