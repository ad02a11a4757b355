"""Text summary of `harness model replicas`: Hot-expert replicas: saving per batch, copy cost, payback, memory budget, pool stability (§9.4.2)."""

from __future__ import annotations

from harness.model.expert_plan_records import ReplicasPlan


def render_text(r: ReplicasPlan) -> str:
    p = r.plan
    lines = [
        f"Scenario {r.head.scenario}  ({r.head.source})",
        f"  {r.model} on {r.gpu}: hot card {p.before[0].rows} assignments, {p.before[0].hbm_bytes / 1e6:.0f} MB per batch",
    ]
    if not p.feasible:
        lines.append(f"  replicas infeasible: {p.reason}")
    else:
        lines.append(
            f"  {p.replicas} replicas ({p.replica_bytes_total / 2**20:.0f} MiB): hot card keeps {p.after[0].rows} assignments, "
            f"{p.before_s * 1e3:.3f} -> {p.after_s * 1e3:.3f} ms per batch (saves {p.saving_per_batch_s * 1e3:.3f} ms)"
        )
    for c in r.copies:
        gains = ", ".join(f"{n} batches {g * 1e3:+.1f} ms" for n, g in c.net_gain_s.items())
        pay = "never" if c.payback_batches is None else f"after {c.payback_batches} batches"
        lines.append(f"  copy over {c.name}: {c.copy_s * 1e3:.3f} ms, pays back {pay}; net {gains}")
    for chk in r.free_memory_checks:
        lines.append(f"  {chk.free_bytes_per_receiver / 2**20:.0f} MiB free per receiver: {'fits' if chk.feasible else chk.reason}")
    lines.append("  replica memory per card: " + ", ".join(f"{layers} layers {b / 2**20:.0f} MiB" for layers, b in r.memory_budget.items()))
    pool = r.pool
    if pool:
        lines.append(f"  pool at {pool.batches_per_s:g} batches/s: {'stable' if pool.stable else 'UNSTABLE'} "
                     f"(saturates at {pool.max_batches_per_s:.0f} batches/s)")
    return "\n".join(lines)
