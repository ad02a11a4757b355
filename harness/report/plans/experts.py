"""Text summary of `harness model experts`: CPU vs GPU expert execution, crossovers, balance points, expert capacity and reuse (§9.3.2–9.3.3)."""

from __future__ import annotations

from harness.model.expert_plan_records import ExpertsPlan
from harness.units import fmt_ms


def _ms(x: float) -> str:
    return fmt_ms(x, 2)


def render_text(r: ExpertsPlan) -> str:
    e = r.expert
    lines = [
        f"Scenario {r.head.scenario}  ({r.head.source})",
        f"  expert of {r.model}: P_e={e.params:,} params, W_e={e.weight_bytes / 2**20:.1f} MiB; "
        f"CPU {r.cpu}, GPU {r.gpu}, link {r.link.label}",
        "",
        "Per batch, experts in sequence (example 9.3):",
        f"  {'kernel/numa':16s} {'tokens':>6s} {'CPU path':>10s} {'GPU path':>10s} {'faster':>6s}   crossover (CPU until/GPU from)   balance m",
    ]
    for p in r.paths:
        c = p.crossover
        cross = "never" if c is None else f"{c.last_cpu_tokens}/{c.first_gpu_tokens}"
        for i, case in enumerate(p.cases):
            tok = case.tokens_per_expert[0] if case.tokens_per_expert else 0
            tail = f"   {cross:>30s}   {p.cpu_balance_tokens:.1f}" if i == 0 else ""
            lines.append(f"  {p.cpu_kernel + '/' + p.numa:16s} {tok:6g} {_ms(case.cpu_s):>10s} {_ms(case.gpu_s):>10s} "
                         f"{case.faster:>6s}{tail}")
    cap = r.capacity
    lines += ["", f"Capacity (§9.3.3, HBM of {cap.gpu}):"]
    for x in cap.resident:
        lines.append(f"  {x.resident_per_layer:3d} resident/layer: {x.resident_per_layer_bytes / 2**30:.3f} GiB/layer, "
                     f"{x.resident_all_layers_bytes / 2**30:.1f} GiB in {x.n_layers} layers vs {x.free_bytes / 2**30:.1f} GiB free "
                     f"-> {'fits' if x.fits else 'does not fit'} (at most {x.max_resident_per_layer}/layer)")
    u = cap.reuse
    lines.append(f"  {u.tokens} tokens × top-{u.top_k}: {u.assignments} assignments, {u.useful_flops / 1e9:.1f} GFLOPs useful")
    for k in ("uniform", "concentrated", "random"):
        x = getattr(u, k)
        t = "" if x.read_s is None else f", read {_ms(x.read_s)}"
        lines.append(f"    {k:12s} {x.experts_touched:6.1f} experts, {x.weight_bytes / 2**30:.3f} GiB{t}")
    return "\n".join(lines)
