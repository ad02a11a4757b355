"""Text table of one sweep (`harness sweep`): each setting's throughput, p95 TTFT and ITL, goodput, reward,
the best setting and the Pareto front (times in the target's seconds: simulated for the embedded target)."""

from __future__ import annotations

from harness.units import fmt_ms, fmt_num


def _ms(x) -> str:
    return fmt_ms(x, suffix="")


def _f(x, fmt: str = ".1f") -> str:
    return fmt_num(x, fmt)


def render_table(r: dict, latency: str) -> str:
    """`r`: harness.sweep.run.SweepResult.to_dict(); `latency`: the scored latency (ttft, tpot, itl, e2e)."""
    lines = [f"sweep run: {r['run_dir']}" + (f"  (time in simulated seconds, time_scale {r['time_scale']:g})" if r["time_scale"] != 1 else ""),
             f"  {'setting':56s} {'tok/s':>8s} {'TTFT p95 ms':>11s} {'ITL p95 ms':>10s} {'goodput/s':>9s} {'reward':>9s}  mark"]
    for p in r["points"]:
        if p["status"] != "ok":
            lines.append(f"  {p['label'][:56]:56s} {p['status']}: {p['reason']}")
            continue
        mark = ("best " if p["best"] else "") + ("pareto" if p["pareto"] else "") + ("" if p["valid"] else " INVALID")
        lines.append(f"  {p['label'][:56]:56s} {_f(p['output_tokens_per_s']):>8s} {_ms(p['ttft_p95_s']):>11s} {_ms(p['itl_p95_s']):>10s} "
                     f"{_f(p['goodput_per_s'], '.3f'):>9s} {_f(p['reward']):>9s}  {mark}")
    b = r["best"]
    lines.append(f"best: {b['label']} (reward {b['reward']:.1f}, {b['output_tokens_per_s']:.1f} tok/s, {latency} p95 {b['latency_p95_s'] * 1e3:.1f} ms)")
    lines.append("pareto front (throughput vs p95 " + latency + "): " + "; ".join(p["label"] for p in r["pareto"]))
    for n in r["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)
