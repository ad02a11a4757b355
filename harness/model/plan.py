"""The capacity plan of a scenario: stage rates, KV hand-off, colocated/PD/chunked capacity,
startup drain, deployment comparison and cost (Chapter 9, §9.1–9.2, §9.6.1, §9.7)."""

from __future__ import annotations

import dataclasses
import math

from harness.errors import HarnessError
from harness.model import capacity, deployment, queueing
from harness.model.calibration import Calibration, ConstantProvenance, LinkConstants, Which
from harness.model.forward import mean_decode_context, param_counts
from harness.model.kv import double_buffer_memory, kv_bytes, kv_bytes_per_token, transfer_time_s
from harness.model.parallel import kv_replication
from harness.model.plan_records import (
    CalibrationSection,
    Capacity,
    CapacityAt,
    CapacityInterval,
    CostAtCapacity,
    CostPlan,
    DeploymentPlan,
    GpuMemoryFit,
    Interval,
    KvHandoff,
    MemoryCheck,
    PdPlan,
    Plan,
    ReferenceAtScale,
    Sensitivity,
    SensitivityPd,
    SensitivityRow,
    SloCost,
    StartupFigures,
    WorkloadFigures,
)
from harness.model.stages import Efficiency, StageRates, Workload, stage_rates
from harness.specs.gpus import get_gpu
from harness.specs.models import ModelSpec, get_model
from harness.specs.scenario import Scenario
from harness.units import DTYPE_BYTES


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
                   which: Which = "value") -> Efficiency:
    """The efficiency of `gpu`: measured (calibration), else the scenario's per-GPU pair, else its global pair."""
    measured = None
    if calibration is not None:
        w = s.workload
        measured = calibration.efficiency(gpu, w.decode_batch, w.input_tokens - w.cached_prefix_tokens, w.weight_dtype, which,
                                          decode_context_tokens=mean_decode_context(w.input_tokens, w.output_tokens))
    if measured is not None:
        eff = measured
    else:
        e = s.efficiency.per_gpu.get(gpu)
        if e is not None:
            eff = Efficiency(e.compute, e.bandwidth, f"scenario efficiency.per_gpu.{gpu}")
        else:
            eff = Efficiency.from_scenario(s.efficiency.compute, s.efficiency.bandwidth, "scenario efficiency")
    return eff if scale == 1.0 else eff.scaled(scale)


def stage_rates_of(s: Scenario, model: ModelSpec, work: Workload, calibration: Calibration | None = None, scale: float = 1.0,
                   which: Which = "value", memory: MemoryCheck | None = None) -> list[StageRates]:
    """Stage rates of every pool's GPU type, in pool order (§9.2.3); with `memory`, each GPU type's decode
    step runs at the largest batch that fits its HBM (at most the scenario's)."""
    out = []
    for p in s.pools:
        w = work
        if memory is not None:
            b = memory.per_gpu[p.gpu].planned_decode_batch
            if 0 < b < work.decode_batch:
                w = dataclasses.replace(work, decode_batch=b)
        link = p.tp_link
        out.append(stage_rates(get_gpu(p.gpu), model, w, efficiency_for(s, p.gpu, calibration, scale, which), tp=p.tp,
                               link_bandwidth_bytes_per_s=link.bandwidth_bytes_per_s if link else None,
                               link_startup_latency_s=link.startup_latency_s if link else 0.0))
    return out


def link_of(s: Scenario, calibration: Calibration | None = None, which: Which = "value") -> LinkConstants | None:
    """The P→D link: fitted (calibration) when measured, else the scenario's [link]; None without one."""
    if s.link is None:
        return None
    if calibration is not None and s.link.spec:
        measured = calibration.link(s.link.spec, which)
        if measured is not None:
            return measured
    return LinkConstants(s.link.bandwidth, s.link.startup, s.link.label)


def _pd(s: Scenario, rates: list[StageRates], link_rate: float, memory: MemoryCheck) -> capacity.PdSearch | None:
    """The PD search; a GPU type whose HBM cannot hold a stage serves none of it (stage time ∞).
    None when memory leaves no allocation with both pools serving."""
    fits = [memory.per_gpu[p.gpu] for p in s.pools]
    dp = [r.prefill_s_per_request if f.prefill_fits else math.inf for r, f in zip(rates, fits)]
    dd = [r.decode_s_per_request if f.planned_decode_batch else math.inf for r, f in zip(rates, fits)]
    try:
        return capacity.pd_search([p.gpu for p in s.pools], dp, dd, [p.instances for p in s.pools], link_rate,
                                  cards_per_unit=[p.tp for p in s.pools])
    except HarnessError:
        if memory.notes:  # not the cluster's shape but its memory: capacity 0, said in plan.warnings
            return None
        raise


def _colocated_counts(s: Scenario, memory: MemoryCheck) -> list[int]:
    """Instances (of tp cards) that can run a whole request (prefill and decode) in their HBM; the others add no
    colocated capacity."""
    return [p.instances if memory.per_gpu[p.gpu].prefill_fits and memory.per_gpu[p.gpu].planned_decode_batch else 0
            for p in s.pools]


MAX_ARRIVAL_RATE_PER_S = 1e9  # far above any cluster; beyond it backlog, link demand and copies stop being finite


def _check_rates(s: Scenario) -> None:
    lam = s.workload.arrival_rate_per_s
    if not (math.isfinite(lam) and lam <= MAX_ARRIVAL_RATE_PER_S):
        raise HarnessError(
            f"workload.arrival_rate_per_s = {lam:g} is above {MAX_ARRIVAL_RATE_PER_S:g} requests/s, where the plan's "
            "figures (backlog λ·T_s, link demand λ·V, copies λ/μ) stop being physical or finite; give the arrival rate "
            "in requests per second."
        )


def _has_pd(s: Scenario, work: Workload) -> bool:
    return sum(p.instances for p in s.pools) >= 2 and work.decode_calls > 0


def plan(s: Scenario, calibration: Calibration | None = None, include_grid: bool = True) -> Plan:
    """Everything `harness model plan` computes; `as_json(plan(s))` is its --json, documented field by field in docs/model.md."""
    _check_rates(s)
    model = get_model(s.workload.model)
    work = workload_of(s)
    memory = _memory(s, model, work)
    rates = stage_rates_of(s, model, work, calibration, memory=memory)
    counts = _colocated_counts(s, memory)
    lam = s.workload.arrival_rate_per_s
    warnings = list(memory.notes)

    v_kv = kv_bytes(model, work.input_tokens, work.kv_bytes_per_elem)
    link = link_of(s, calibration)
    if link:
        t_kv = transfer_time_s(v_kv, link.bandwidth_bytes_per_s, link.startup_latency_s)
        link_rate = 1.0 / t_kv
    else:
        t_kv = None
        link_rate = math.inf

    mu_co = capacity.colocated_rate(rates, counts)
    mu_ch = capacity.chunked_colocated_rate(rates, counts)
    kv = KvHandoff(
        bytes_per_token=kv_bytes_per_token(model, work.kv_bytes_per_elem),
        bytes_per_request=v_kv,
        transfer_s=t_kv,
        link=link.label if link else None,
        link_bandwidth_bytes_per_s=link.bandwidth_bytes_per_s if link else None,
        link_startup_latency_s=link.startup_latency_s if link else None,
        double_buffer_bytes=double_buffer_memory(v_kv).total_bytes,
        final_bytes_per_request=kv_bytes(model, work.input_tokens + work.decode_calls, work.kv_bytes_per_elem),
    )
    search = None
    pd_plan = None
    if _has_pd(s, work):
        search = _pd(s, rates, link_rate, memory)
        if search is None:
            warnings.append("PD capacity 0: no split of these pools puts a GPU that holds prefill in P and one that "
                            "holds decode in D (see memory.per_gpu)")
    if search is not None:
        grid = omitted = None
        if include_grid and search.grid.size <= capacity.MAX_GRID_CELLS_LISTED:
            grid = tuple(search.grid.cells())
        elif include_grid:
            omitted = (f"{search.grid.size:,} allocations, more than the {capacity.MAX_GRID_CELLS_LISTED:,} listed one by one; "
                       "best, optimal and references are complete")
        pd_plan = PdPlan(
            best=search.best,
            optimal=tuple(search.optimal),
            grid=grid,
            references={ref.name: _reference(s, search.grid, ref.prefill) for ref in s.reference_allocations},
            search=search.grid,
            grid_omitted=omitted,
        )

    # startup drain (§9.6.1, Fig. 9-42)
    st = s.startup
    schemes = {"replicas": mu_co, "chunked_colocated": mu_ch}
    if pd_plan is not None:
        schemes["pd"] = pd_plan.best.requests_per_s
        for name, a in pd_plan.references.items():
            schemes[f"pd:{name}"] = a.requests_per_s
    drain = {name: queueing.drain(name, lam, st.startup_s, mu, st.deadline_s) for name, mu in schemes.items()}
    startup = StartupFigures(
        startup_s=st.startup_s,
        deadline_s=st.deadline_s,
        backlog_requests=queueing.startup_backlog(lam, st.startup_s),
        min_requests_per_s_for_deadline=(
            queueing.min_rate_for_deadline(lam, st.startup_s, st.deadline_s) if st.deadline_s else None
        ),
    )

    # sensitivity to efficiency (§9.7.2: 90% of the assumed efficiency)
    sens = {}
    for f in s.sensitivity.efficiency_scale:
        r2 = stage_rates_of(s, model, work, calibration, f, memory=memory)
        sens_pd = None
        pd2 = _pd(s, r2, link_rate, memory) if pd_plan is not None else None
        if pd2 is not None:  # what fits in memory does not depend on the efficiency
            refs = {}
            for ref in s.reference_allocations:
                a = _reference(s, pd2.grid, ref.prefill)
                refs[ref.name] = ReferenceAtScale(a, queueing.clear_at_s(lam, st.startup_s, a.requests_per_s))
            sens_pd = SensitivityPd(pd2.best, queueing.clear_at_s(lam, st.startup_s, pd2.best.requests_per_s), refs)
        sens[f"{f:g}"] = SensitivityRow(
            colocated_requests_per_s=capacity.colocated_rate(r2, counts),
            chunked_colocated_requests_per_s=capacity.chunked_colocated_rate(r2, counts),
            pd=sens_pd,
        )

    return Plan(
        scenario=s.name,
        source=s.source,
        model=model.name,
        workload=WorkloadFigures(
            input_tokens=work.input_tokens,
            output_tokens=work.output_tokens,
            cached_prefix_tokens=work.cached_prefix_tokens,
            new_tokens=work.new_tokens,
            decode_calls=work.decode_calls,
            decode_batch=work.decode_batch,
            mean_context_tokens=work.mean_context_tokens,
            arrival_rate_per_s=lam,
        ),
        stage_rates={r.gpu: r for r in rates},
        kv=kv,
        memory=memory,
        colocated=Capacity(mu_co),
        chunked_colocated=Capacity(mu_ch),
        pd=pd_plan,
        drain=drain,
        startup=startup,
        sensitivity=Sensitivity(sens),
        deployment=_deployment(s, model, work, mu_co, search, rates, v_kv, link, lam),
        calibration=None if calibration is None else _calibration_section(s, model, work, calibration, v_kv, memory),
        warnings=tuple(warnings) or None,
    )


def _capacity_at(s: Scenario, model: ModelSpec, work: Workload, calibration: Calibration, v_kv: float, which: Which,
                 memory: MemoryCheck) -> CapacityAt:
    """Capacity with every measured constant at one end of its interval (low: efficiencies and link
    bandwidth at their lower bounds, startup latency at its upper bound; high: the reverse)."""
    rates = stage_rates_of(s, model, work, calibration, which=which, memory=memory)
    counts = _colocated_counts(s, memory)
    link = link_of(s, calibration, which)
    link_rate = 1.0 / transfer_time_s(v_kv, link.bandwidth_bytes_per_s, link.startup_latency_s) if link else math.inf
    best = clear = None
    search = _pd(s, rates, link_rate, memory) if _has_pd(s, work) else None
    if search is not None:
        best = search.best.requests_per_s
        clear = queueing.clear_at_s(s.workload.arrival_rate_per_s, s.startup.startup_s, best)
    return CapacityAt(capacity.colocated_rate(rates, counts), capacity.chunked_colocated_rate(rates, counts), best, clear)


def _calibration_section(s: Scenario, model: ModelSpec, work: Workload, calibration: Calibration, v_kv: float,
                         memory: MemoryCheck) -> CalibrationSection:
    """Where every constant came from, and capacity over the constants' 95% intervals.

    Capacity rises with every efficiency and link bandwidth and falls with the startup latency, so
    evaluating all constants at the pessimistic and at the optimistic ends bounds it (a conservative
    interval: the ends are not joint percentiles)."""
    link_default = LinkConstants(s.link.bandwidth, s.link.startup, s.link.label) if s.link is not None else None
    value = _capacity_at(s, model, work, calibration, v_kv, "value", memory)
    low = _capacity_at(s, model, work, calibration, v_kv, "low", memory)
    high = _capacity_at(s, model, work, calibration, v_kv, "high", memory)

    def iv(name: str) -> Interval:
        return Interval(getattr(value, name), getattr(low, name), getattr(high, name))

    interval = CapacityInterval(
        colocated_requests_per_s=iv("colocated_requests_per_s"),
        chunked_colocated_requests_per_s=iv("chunked_colocated_requests_per_s"),
        pd_best_requests_per_s=iv("pd_best_requests_per_s"),
        # the clear-by time falls as capacity rises: its low end comes from the optimistic constants
        pd_best_clear_at_s=Interval(value.pd_best_clear_at_s, high.pd_best_clear_at_s, low.pd_best_clear_at_s),
    )
    rows: tuple[ConstantProvenance, ...] = tuple(calibration.provenance(
        [p.gpu for p in s.pools], s.link.spec if s.link else None, work.decode_batch, work.new_tokens,
        s.workload.weight_dtype, link_default, decode_context_tokens=work.mean_context_tokens,
    ))
    return CalibrationSection(file=calibration.source, machine=calibration.machine, constants=rows, capacity_interval=interval)


def _reference(s: Scenario, grid: capacity.PdGrid, prefill: dict[str, int]) -> capacity.PdAllocation:
    idx = tuple(prefill.get(p.gpu, 0) // p.tp for p in s.pools)  # cards -> instances
    return grid.allocation(idx)


def _memory(s: Scenario, model: ModelSpec, work: Workload) -> MemoryCheck:
    """HBM check of §9.7.2: D holds batch × final KV + one receive buffer + weights; P holds two states.

    A GPU type that cannot hold the scenario's decode batch decodes at the largest batch that fits,
    ⌊(HBM − weights − receive buffer)/final KV⌋; one that cannot hold even one request, or a prefill,
    serves none of that stage (capacity 0). Either is said in the GPU's note and in plan.warnings.
    A TP instance holds the weights once and each token's KV `kv_replication` times (harness.model.parallel)
    in the HBM of its `tp` cards together."""
    pc = param_counts(model)
    w_bytes = pc.total * work.weight_bytes_per_param
    final_1 = kv_bytes(model, work.input_tokens + work.decode_calls, work.kv_bytes_per_elem)
    recv_1 = kv_bytes(model, work.input_tokens, work.kv_bytes_per_elem)
    d_need = w_bytes + work.decode_batch * final_1 + recv_1
    p_need = w_bytes + 2 * recv_1
    per_gpu = {}
    gib = 2**30
    for p in s.pools:
        repl = kv_replication(model, p.tp)
        final, recv = final_1 * repl, recv_1 * repl
        d_need = w_bytes + work.decode_batch * final + recv
        p_need = w_bytes + 2 * recv
        cap = get_gpu(p.gpu).hbm_capacity_bytes * p.tp
        max_b = max(0, math.floor((cap - w_bytes - recv) / final)) if final > 0 else work.decode_batch
        planned = min(work.decode_batch, max_b)
        notes = []
        where = f" of a TP{p.tp} instance ({p.tp} cards)" if p.tp > 1 else ""
        more = "; give the pool a larger tp" if p.tp < 8 and model.n_heads % (2 * p.tp) == 0 else ""
        if max_b == 0:
            notes.append(f"decode does not fit: weights {w_bytes / gib:.1f} GiB + one request's KV "
                         f"({(final + recv) / gib:.2f} GiB with its receive buffer) exceed {cap / gib:.1f} GiB of HBM{where}; "
                         f"decode capacity 0 on this GPU type{more}")
        elif planned < work.decode_batch:
            notes.append(f"decode batch {work.decode_batch} needs {d_need / gib:.1f} GiB of {cap / gib:.1f} GiB HBM; "
                         f"planned at the largest batch that fits, {planned}")
        if p_need > cap:
            notes.append(f"prefill does not fit: weights + two states need {p_need / gib:.1f} GiB of {cap / gib:.1f} GiB "
                         f"HBM{where}; prefill capacity 0 on this GPU type{more}")
        per_gpu[p.gpu] = GpuMemoryFit(hbm_capacity_bytes=get_gpu(p.gpu).hbm_capacity_bytes, decode_fits=d_need <= cap,
                                      prefill_fits=p_need <= cap, max_decode_batch=max_b, planned_decode_batch=planned,
                                      note="; ".join(notes) or None, tensor_parallel=p.tp if p.tp > 1 else None,
                                      expert_parallel=p.ep if p.ep > 1 else None)
    return MemoryCheck(weight_bytes=w_bytes, decode_side_bytes=d_need, prefill_side_bytes=p_need, per_gpu=per_gpu)


def _deployment(s: Scenario, model: ModelSpec, work: Workload, mu_co: float, pd: capacity.PdSearch | None,
                rates: list[StageRates], v_kv: float, link: LinkConstants | None, lam: float) -> DeploymentPlan:
    """§9.7.2–9.7.3. Without a PD split or a link only the replicas row is left, and the note says why;
    scale-out and cost then use the replicas' rate."""
    states = {"gqa" if model.attention == "gqa" else "mla": v_kv}
    for other in s.deployment.compare_states:
        om = get_model(other)
        states[other] = kv_bytes(om, work.input_tokens, work.kv_bytes_per_elem)
    note = None
    if pd is None:
        note = ("no PD split: " + ("one output token means no decode calls (G = 1)" if work.decode_calls == 0 else
                                   "fewer than two GPUs, or no GPU type holds a stage (memory.per_gpu)")
                + "; replicas only")
    elif link is None:
        note = "no [link]: the PD rows need the link that carries the KV state; replicas only"
    if pd is not None and link is not None:
        pd_compute = min(pd.best.prefill_pool_requests_per_s, pd.best.decode_pool_requests_per_s)
        rows = deployment.scheme_rows(mu_co, pd_compute, states, link.bandwidth_bytes_per_s, link.startup_latency_s, lam)
    else:
        rows = deployment.scheme_rows(mu_co, 0.0, {}, 1.0, 0.0, lam)  # the replicas row alone
    reuse = {}
    if link is not None:
        # recompute cost of a reuse: prefill on the fastest P-side GPU type of the best allocation (any type without PD)
        p_types = [r for r in rates if pd is None or pd.best.prefill.get(r.gpu, 0) > 0]
        recompute = min(r.prefill_s_per_request for r in p_types)
        reuse = {name: deployment.reuse_pair(v, link.bandwidth_bytes_per_s, link.startup_latency_s, lam, recompute)
                 for name, v in states.items()}
    served = pd.best.requests_per_s if pd is not None else mu_co
    cost = None
    if s.cost is not None:
        c = s.cost
        slo = None
        if c.slo_fraction is not None:
            good = served * c.slo_fraction
            slo = SloCost(c.slo_fraction, good, deployment.cost_per_1000_requests(c.price_per_hour, good))
        cost = CostPlan(
            currency=c.currency,
            price_per_hour=c.price_per_hour,
            per_1000_at_arrival_rate=(deployment.cost_per_1000_requests(c.price_per_hour, min(lam, served)) if lam else None),
            per_1000_at_capacity=CostAtCapacity(
                replicas=deployment.cost_per_1000_requests(c.price_per_hour, mu_co),
                pd=deployment.cost_per_1000_requests(c.price_per_hour, pd.best.requests_per_s) if pd is not None else None,
            ),
            slo=slo,
        )
    return DeploymentPlan(
        schemes=tuple(rows),
        reuse_pair=reuse,
        scale_out=deployment.scale_out(
            served, lam,
            queueing.min_rate_for_deadline(lam, s.startup.startup_s, s.startup.deadline_s) if s.startup.deadline_s else None,
        ),
        shared_pool_states=(
            {n: deployment.pool_capacity_states(s.deployment.shared_pool_bytes, v) for n, v in states.items()}
            if s.deployment.shared_pool_bytes else None
        ),
        cost=cost,
        note=note,
    )
