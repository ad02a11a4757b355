"""The words of a load run's headline figures: one wording for the console (bench-pd, plain Locust) and the reports.

Every figure says what it counts: the window and how its start was chosen, whether it is steady, the
throughput with its 95 % interval beside the offered rate (open loop) or the concurrency held (closed loop),
goodput over the same completions, and the notes a reader needs (workloads.summary.LoadSummary.notes).
"""

from __future__ import annotations

from harness.units import fmt_ms
from workloads.summary import LoadSummary


def window_text(s: LoadSummary) -> str:
    basis = f" ({s.window_basis})" if s.window_basis else ""
    return f"window [{s.window_start_s:.1f}, {s.window_end_s:.1f}) s{basis}"


def throughput_label(s: LoadSummary) -> str:
    """'steady state (window)', or what the window is when it is not steady."""
    if s.steady is False:
        return "window, NOT steady"
    return "steady state (window)" if s.steady else "window"


def throughput_text(s: LoadSummary) -> str:
    """Request throughput over the window with its interval, against the offered rate or the concurrency held."""
    if s.window_note:
        return f"none completed in the window: {s.window_note}"
    iv = s.request_throughput_interval_per_s
    out = f"{s.request_throughput_per_s:.3f} req/s"
    if iv is not None:
        out += f" (95 % interval {iv[0]:.3f}–{iv[1]:.3f})"
    if s.load_mode == "closed-loop":
        if s.in_flight_mean is not None:
            out += f" with {s.in_flight_mean:.2f} requests in flight on average (the concurrency held)"
    else:
        out += f"; offered {s.intended_rate_per_s:.3f} req/s (intended sends in the window)"
    return out


def goodput_text(s: LoadSummary) -> str:
    if s.goodput_per_s is None:
        return "no SLO given"
    n = s.requests_ended_in_window
    frac = "—" if s.goodput_fraction is None else f"{s.goodput_fraction * 100:.0f} %"
    of = f" of the {n} requests that ended in the window" if n is not None else " of the requests measured"
    return f"{s.goodput_per_s:.3f} req/s ({frac}{of} met every SLO)"


def left_out_text(s: LoadSummary) -> str:
    """The successful requests the latency figures leave out (sent outside the window), said, not dropped silently."""
    out = s.errors_by_class.get("ok", 0) - s.requests_ok
    return (f"; {out} successful requests sent outside the window [{s.window_start_s:.1f}, {s.window_end_s:.1f}) s are "
            "left out of them" if out > 0 else "")


def headline_lines(s: LoadSummary, mode: str) -> list[str]:
    """The console's lines for one run (`mode`: e.g. 'open-loop', 'closed-loop (4 users)')."""
    lines = [f"load: {mode}; {window_text(s)}"]
    lines.append(f"{throughput_label(s)}: {throughput_text(s)}"
                 + ("" if s.window_note else f", {s.output_tokens_per_s:.0f} output tokens/s; goodput {goodput_text(s)}"))
    if s.run_duration_s:
        lines.append(f"incl. startup and drain (vLLM bench serve's definition): {s.request_throughput_incl_drain_per_s:.3f} req/s, "
                     f"{s.output_tokens_incl_drain_per_s:.0f} output tokens/s over {s.run_duration_s:.1f} s")
    lines.append(f"latency (requests sent in the window): TTFT p50 {fmt_ms(s.ttft_s.p50)} p90 {fmt_ms(s.ttft_s.p90)} "
                 f"p99 {fmt_ms(s.ttft_s.p99)}; TPOT p50 {fmt_ms(s.tpot_s.p50)} ({s.requests_ok} succeeded; a p99 needs ≥ 1000 "
                 f"requests to be stable){left_out_text(s)}")
    lines += [f"note: {n}" for n in s.notes]
    return lines
