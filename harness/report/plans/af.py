"""Text summary of `harness model af`: Attention/FFN split: per-layer AF transfers vs one PD transfer, α*, the micro-batch pipeline (§9.3.4)."""

from __future__ import annotations

from harness.model.expert_plan_records import AfPlan


def render_text(r: AfPlan) -> str:
    lines = [f"Scenario {r.head.scenario}  ({r.head.source})", f"  AF model {r.model}"]
    for b in r.per_bandwidth:
        st = b.decode_step
        lines.append(
            f"  {b.bandwidth_bytes_per_s / 1e9:g} GB/s: one decode step {st.transfers} transfers, {st.payload_bytes / 1024:.0f} KiB, "
            f"{st.payload_s * 1e6:.1f} µs payload + {st.startup_s * 1e6:.0f} µs launches = {st.total_s * 1e3:.3f} ms; "
            f"prefill of {b.prefill_step.tokens} tokens {b.prefill_step.payload_bytes / 2**30:.2f} GiB, {b.prefill_step.payload_s * 1e3:.1f} ms payload"
        )
        for q in b.requests:
            lines.append(
                f"    {q.state:16s} {q.decode_steps:5d} steps: AF {q.af_s * 1e3:8.1f} ms vs PD {q.pd_s * 1e3:6.1f} ms "
                f"({q.af_over_pd:.1f}×), α* = {q.critical_startup_latency_s * 1e6:.0f} µs"
            )
    p = r.pipeline
    lines.append(f"  pipeline {p.stage_s_per_microbatch} s × {p.microbatches}: serial {p.serial_s * 1e3:.1f} ms, "
                 f"pipelined {p.pipelined_s * 1e3:.1f} ms, overhead budget {p.saving_s * 1e3:.1f} ms")
    m = r.mla_compact_path
    if m:
        e = m.effect
        before = e.decode_s_per_request_before
        after = e.decode_s_per_request_after
        t = e.max_extra_s_per_request_step
        lines.append(
            f"  compact MLA path ({e.extra_flops_per_request_step / 1e9:.2f} GFLOPs/request-step): D pool "
            f"{e.decode_pool_requests_per_s_before:.2f} -> {e.decode_pool_requests_per_s_after:.2f} req/s; "
            + ", ".join(f"{g} {before[g]:.3f} -> {after[g]:.3f} GPU-s" for g in before)
            + ("" if t is None else f"; pool short of {e.arrival_rate_per_s:g} req/s above {t * 1e6:.0f} µs per request-step")
        )
    return "\n".join(lines)
