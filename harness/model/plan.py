"""The capacity plan of a scenario: stage rates, KV hand-off, colocated/PD/chunked capacity,
startup drain, deployment comparison and cost (Chapter 9, §9.1–9.2, §9.6.1, §9.7)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.model import capacity, deployment, queueing
from harness.model.kv import double_buffer_memory, kv_bytes, kv_bytes_per_token, transfer_time_s
from harness.model.forward import param_counts
from harness.model.stages import Efficiency, StageRates, Workload, stage_rates
from harness.specs.gpus import get_gpu
from harness.specs.models import ModelSpec, get_model
from harness.specs.scenario import Scenario
from harness.units import DTYPE_BYTES


@dataclass(frozen=True)
class Calibration:
    """Measured efficiencies per GPU that replace the scenario's defaults (filled by calibration).

    `constants` (harness.calibration.apply.MeasuredConstants) gives the efficiency at the
    scenario's decode batch and prefill tokens and the fitted link, each with a 95% interval.
    """

    efficiency: dict[str, Efficiency] = field(default_factory=dict)
    source: str = ""
    constants: Any = None


def workload_of(s: Scenario) -> Workload:
    w = s.workload
    return Workload(
        input_tokens=w.input_tokens,
        output_tokens=w.output_tokens,
        cached_prefix_tokens=w.cached_prefix_tokens,
        decode_batch=w.decode_batch,
        weight_bytes_per_param=DTYPE_BYTES[w.weight_dtype],
        kv_bytes_per_elem=DTYPE_BYTES[w.kv_dtype],
    )


def efficiency_for(s: Scenario, gpu: str, calibration: Calibration | None = None, scale: float = 1.0,
                   which: str = "value") -> Efficiency:
    measured = None
    if calibration and calibration.constants is not None:
        w = s.workload
        measured = calibration.constants.efficiency(
            gpu, w.decode_batch, w.input_tokens - w.cached_prefix_tokens, w.weight_dtype, which
        )
    if measured is not None:
        eff = measured
    elif calibration and gpu in calibration.efficiency:
        eff = calibration.efficiency[gpu]
    else:
        e = s.efficiency.per_gpu.get(gpu)
        if e is not None:
            eff = Efficiency(e.compute, e.bandwidth, f"scenario efficiency.per_gpu.{gpu}")
        elif (s.efficiency.compute, s.efficiency.bandwidth) == (0.5, 0.5):
            eff = Efficiency()
        else:
            eff = Efficiency(s.efficiency.compute, s.efficiency.bandwidth, "scenario efficiency")
    return eff if scale == 1.0 else eff.scaled(scale)


def _rates(s: Scenario, model: ModelSpec, work: Workload, calibration: Calibration | None, scale: float = 1.0,
           which: str = "value") -> list[StageRates]:
    return [stage_rates(get_gpu(p.gpu), model, work, efficiency_for(s, p.gpu, calibration, scale, which)) for p in s.pools]


def _link(s: Scenario, calibration: Calibration | None = None, which: str = "value") -> tuple[float, float, str] | None:
    if s.link is None:
        return None
    if calibration and calibration.constants is not None and s.link.spec:
        measured = calibration.constants.link(s.link.spec, which)
        if measured is not None:
            return measured
    return s.link.bandwidth, s.link.startup, s.link.label


def _stage_dict(r: StageRates) -> dict[str, Any]:
    return {
        "prefill_tokens_per_s": r.prefill_tokens_per_s,
        "decode_calls_per_s": r.decode_calls_per_s,
        "prefill_s_per_request": r.prefill_s_per_request,
        "decode_s_per_request": r.decode_s_per_request,
        "colocated_s_per_request": r.colocated_s_per_request,
        "bound": {"prefill": r.prefill_bound, "decode": r.decode_bound},
        "prefill_flops": r.prefill.flops,
        "prefill_bytes": r.prefill.bytes,
        "prefill_compute_s": r.prefill_compute_s,
        "prefill_memory_s": r.prefill_memory_s,
        "decode_step_s": r.decode_step_s,
        "decode_step_flops": r.decode_step.flops,
        "decode_step_bytes": r.decode_step.bytes,
        "decode_step_weight_bytes": r.decode_step.weight_bytes,
        "decode_step_kv_bytes": r.decode_step.kv_read_bytes,
        "decode_step_compute_s": r.decode_step_compute_s,
        "decode_step_memory_s": r.decode_step_memory_s,
        "hidden_prefill_tokens_per_decode_step": r.hidden_prefill_tokens_per_decode_step,
        "efficiency": {"compute": r.efficiency.compute, "bandwidth": r.efficiency.bandwidth, "source": r.efficiency.source},
    }


def _pd(s: Scenario, rates: list[StageRates], link_rate: float) -> capacity.PdSearch:
    return capacity.pd_search(
        [p.gpu for p in s.pools],
        [r.prefill_s_per_request for r in rates],
        [r.decode_s_per_request if r.decode_calls_per_request else 0.0 for r in rates],
        [p.count for p in s.pools],
        link_rate,
    )


def plan(s: Scenario, calibration: Calibration | None = None, include_grid: bool = True) -> dict[str, Any]:
    """Everything `harness model plan --json` prints; documented field by field in docs/model.md."""
    model = get_model(s.workload.model)
    work = workload_of(s)
    rates = _rates(s, model, work, calibration)
    counts = [p.count for p in s.pools]
    lam = s.workload.arrival_rate_per_s

    v_kv = kv_bytes(model, work.input_tokens, work.kv_bytes_per_elem)
    link = _link(s, calibration)
    if link:
        bw, alpha, label = link
        t_kv = transfer_time_s(v_kv, bw, alpha)
        link_rate = 1.0 / t_kv
    else:
        bw = alpha = None
        label = None
        t_kv = None
        link_rate = math.inf

    mu_co = capacity.colocated_rate(rates, counts)
    mu_ch = capacity.chunked_colocated_rate(rates, counts)
    out: dict[str, Any] = {
        "scenario": s.name,
        "source": s.source,
        "model": model.name,
        "workload": {
            "input_tokens": work.input_tokens,
            "output_tokens": work.output_tokens,
            "cached_prefix_tokens": work.cached_prefix_tokens,
            "new_tokens": work.new_tokens,
            "decode_calls": work.decode_calls,
            "decode_batch": work.decode_batch,
            "mean_context_tokens": work.mean_context_tokens,
            "arrival_rate_per_s": lam,
        },
        "stage_rates": {r.gpu: _stage_dict(r) for r in rates},
        "kv": {
            "bytes_per_token": kv_bytes_per_token(model, work.kv_bytes_per_elem),
            "bytes_per_request": v_kv,
            "transfer_s": t_kv,
            "link": label,
            "link_bandwidth_bytes_per_s": bw,
            "link_startup_latency_s": alpha,
            "double_buffer_bytes": double_buffer_memory(v_kv).total_bytes,
            "final_bytes_per_request": kv_bytes(model, work.input_tokens + work.decode_calls, work.kv_bytes_per_elem),
        },
        "memory": _memory(s, model, work),
        "colocated": {"requests_per_s": mu_co},
        "chunked_colocated": {"requests_per_s": mu_ch},
    }
    pd = None
    if sum(counts) >= 2 and work.decode_calls > 0:
        pd = _pd(s, rates, link_rate)
        out["pd"] = {
            "best": pd.best.to_dict(),
            "optimal": [a.to_dict() for a in pd.optimal],
            "grid": [a.to_dict() for a in pd.grid.cells()] if include_grid else None,
            "references": {
                ref.name: _reference(s, pd.grid, ref.prefill).to_dict() for ref in s.reference_allocations
            },
        }
    else:
        out["pd"] = None

    # startup drain (§9.6.1, Fig. 9-42)
    st = s.startup
    schemes = {"replicas": mu_co, "chunked_colocated": mu_ch}
    if pd is not None:
        schemes["pd"] = pd.best.requests_per_s
        for ref in s.reference_allocations:
            schemes[f"pd:{ref.name}"] = _reference(s, pd.grid, ref.prefill).requests_per_s
    out["drain"] = {
        name: queueing.drain(name, lam, st.startup_s, mu, st.deadline_s).to_dict() for name, mu in schemes.items()
    }
    out["startup"] = {
        "startup_s": st.startup_s,
        "deadline_s": st.deadline_s,
        "backlog_requests": queueing.startup_backlog(lam, st.startup_s),
        "min_requests_per_s_for_deadline": (
            queueing.min_rate_for_deadline(lam, st.startup_s, st.deadline_s) if st.deadline_s else None
        ),
    }

    # sensitivity to efficiency (§9.7.2: 90% of the assumed efficiency)
    sens = {}
    for f in s.sensitivity.efficiency_scale:
        r2 = _rates(s, model, work, calibration, f)
        entry: dict[str, Any] = {
            "colocated_requests_per_s": capacity.colocated_rate(r2, counts),
            "chunked_colocated_requests_per_s": capacity.chunked_colocated_rate(r2, counts),
        }
        if pd is not None:
            pd2 = _pd(s, r2, link_rate)
            entry["pd_best"] = pd2.best.to_dict()
            entry["pd_best_clear_at_s"] = queueing.clear_at_s(lam, st.startup_s, pd2.best.requests_per_s)
            entry["references"] = {}
            for ref in s.reference_allocations:
                a = _reference(s, pd2.grid, ref.prefill)
                entry["references"][ref.name] = {
                    **a.to_dict(), "clear_at_s": queueing.clear_at_s(lam, st.startup_s, a.requests_per_s)
                }
        sens[f"{f:g}"] = entry
    out["sensitivity"] = {"efficiency_scale": sens}

    out["deployment"] = _deployment(s, model, work, mu_co, pd, rates, v_kv, link, lam)
    if calibration is not None and calibration.constants is not None:
        out["calibration"] = _calibration_section(s, model, work, calibration, v_kv)
    return out


def _capacity_at(s: Scenario, model: ModelSpec, work: Workload, calibration: Calibration, v_kv: float, which: str) -> dict[str, Any]:
    """Capacity with every measured constant at one end of its interval (low: efficiencies and link
    bandwidth at their lower bounds, startup latency at its upper bound; high: the reverse)."""
    rates = _rates(s, model, work, calibration, which=which)
    counts = [p.count for p in s.pools]
    link = _link(s, calibration, which)
    link_rate = 1.0 / transfer_time_s(v_kv, link[0], link[1]) if link else math.inf
    out: dict[str, Any] = {
        "colocated_requests_per_s": capacity.colocated_rate(rates, counts),
        "chunked_colocated_requests_per_s": capacity.chunked_colocated_rate(rates, counts),
        "pd_best_requests_per_s": None,
        "pd_best_clear_at_s": None,
    }
    if sum(counts) >= 2 and work.decode_calls > 0:
        best = _pd(s, rates, link_rate).best.requests_per_s
        out["pd_best_requests_per_s"] = best
        out["pd_best_clear_at_s"] = queueing.clear_at_s(s.workload.arrival_rate_per_s, s.startup.startup_s, best)
    return out


def _calibration_section(s: Scenario, model: ModelSpec, work: Workload, calibration: Calibration, v_kv: float) -> dict[str, Any]:
    """Where every constant came from, and capacity over the constants' 95% intervals.

    Capacity rises with every efficiency and link bandwidth and falls with the startup latency, so
    evaluating all constants at the pessimistic and at the optimistic ends bounds it (a conservative
    interval: the ends are not joint percentiles)."""
    c = calibration.constants
    link_defaults = (s.link.bandwidth, s.link.startup) if s.link is not None else None
    value = _capacity_at(s, model, work, calibration, v_kv, "value")
    low = _capacity_at(s, model, work, calibration, v_kv, "low")
    high = _capacity_at(s, model, work, calibration, v_kv, "high")
    interval = {k: {"value": value[k], "low": low[k], "high": high[k]} for k in value}
    # the clear-by time falls as capacity rises: its low end comes from the optimistic constants
    interval["pd_best_clear_at_s"] = {"value": value["pd_best_clear_at_s"], "low": high["pd_best_clear_at_s"],
                                      "high": low["pd_best_clear_at_s"]}
    return {
        "file": calibration.source,
        "machine": c.record.machine,
        "constants": c.provenance([p.gpu for p in s.pools], s.link.spec if s.link else None, work.decode_batch,
                                  work.new_tokens, s.workload.weight_dtype, link_defaults),
        "capacity_interval": interval,
    }


def _reference(s: Scenario, grid: capacity.PdGrid, prefill: dict[str, int]) -> capacity.PdAllocation:
    idx = tuple(prefill.get(p.gpu, 0) for p in s.pools)
    return grid.allocation(idx)


def _memory(s: Scenario, model: ModelSpec, work: Workload) -> dict[str, Any]:
    """HBM check of §9.7.2: D holds batch × final KV + one receive buffer + weights; P holds two states."""
    pc = param_counts(model)
    w_bytes = pc.total * work.weight_bytes_per_param
    final = kv_bytes(model, work.input_tokens + work.decode_calls, work.kv_bytes_per_elem)
    recv = kv_bytes(model, work.input_tokens, work.kv_bytes_per_elem)
    d_need = w_bytes + work.decode_batch * final + recv
    p_need = w_bytes + 2 * recv
    out = {"weight_bytes": w_bytes, "decode_side_bytes": d_need, "prefill_side_bytes": p_need, "per_gpu": {}}
    for p in s.pools:
        cap = get_gpu(p.gpu).hbm_capacity_bytes
        out["per_gpu"][p.gpu] = {
            "hbm_capacity_bytes": cap,
            "decode_fits": d_need <= cap,
            "prefill_fits": p_need <= cap,
        }
    return out


def _deployment(s, model, work, mu_co, pd, rates, v_kv, link, lam) -> dict[str, Any] | None:
    if pd is None or link is None:
        return None
    bw, alpha, _ = link
    pd_compute = min(pd.best.prefill_pool_requests_per_s, pd.best.decode_pool_requests_per_s)
    states = {"gqa" if model.attention == "gqa" else "mla": v_kv}
    for other in s.deployment.compare_states:
        om = get_model(other)
        states[other] = kv_bytes(om, work.input_tokens, work.kv_bytes_per_elem)
    rows = deployment.scheme_rows(mu_co, pd_compute, states, bw, alpha, lam)
    # recompute cost of a reuse: prefill on the fastest P-side GPU type of the best allocation
    p_types = [r for r in rates if pd.best.prefill.get(r.gpu, 0) > 0]
    recompute = min(r.prefill_s_per_request for r in p_types)
    out: dict[str, Any] = {
        "schemes": [r.to_dict() for r in rows],
        "reuse_pair": {name: deployment.reuse_pair(v, bw, alpha, lam, recompute).to_dict() for name, v in states.items()},
        "scale_out": deployment.scale_out(
            pd.best.requests_per_s, lam,
            queueing.min_rate_for_deadline(lam, s.startup.startup_s, s.startup.deadline_s) if s.startup.deadline_s else None,
        ).to_dict(),
    }
    if s.deployment.shared_pool_bytes:
        out["shared_pool_states"] = {n: deployment.pool_capacity_states(s.deployment.shared_pool_bytes, v) for n, v in states.items()}
    if s.cost is not None:
        c = s.cost
        cost: dict[str, Any] = {
            "currency": c.currency,
            "price_per_hour": c.price_per_hour,
            "per_1000_at_arrival_rate": deployment.cost_per_1000_requests(c.price_per_hour, min(lam, pd.best.requests_per_s)) if lam else None,
            "per_1000_at_capacity": {
                "replicas": deployment.cost_per_1000_requests(c.price_per_hour, mu_co),
                "pd": deployment.cost_per_1000_requests(c.price_per_hour, pd.best.requests_per_s),
            },
        }
        if c.slo_fraction is not None:
            good = pd.best.requests_per_s * c.slo_fraction
            cost["slo_fraction"] = c.slo_fraction
            cost["good_requests_per_s"] = good
            cost["effective_per_1000_good"] = deployment.cost_per_1000_requests(c.price_per_hour, good)
        out["cost"] = cost
    return out
