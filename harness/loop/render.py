"""Step 5 of the loop: render the report as Markdown (what docs/loop-cpu.md shows)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from harness.loop.compare import (CONDITION_STEP_PCT, MEASURED_MEDIAN_CONFIDENCE, _is_time, band_summary, condition_summary,
                                  precision_summary, repeat_spread_pct, repeatability_summary, speed_summary)
from harness.loop.report import LoopReport
from harness.units import fmt_ms, fmt_num


def _fmt(q: str, v: float | None) -> str:
    return fmt_ms(v) if _is_time(q) else fmt_num(v, ".1f")


def render_markdown(r: LoopReport) -> str:
    """The loop's report as Markdown (what docs/loop-cpu.md shows)."""
    c = r.constants
    s = r.settings
    if r.status != "complete":
        head = [f"**Run {r.status}**: {r.error}", "", "What was measured before that is below; the partial run is kept.", ""]
    else:
        head = []
    if "gguf" not in r.model:  # the GPU loop: no host calibration, no stages
        lines = head + [f"Model: {r.model.get('name')}; engine: {r.engine.get('name')} ({s.get('config')}) on {s.get('gpu')}"
                        + (f", measured at {s['target_url']}" if s.get("target_url") else "") + "."]
        lines += _served(r) + _steps(r)
        return _tail(r, lines)
    lines = head + [
        f"Model: `{r.model['gguf'].rsplit('/', 1)[-1]}` ({r.model['architecture']}, {r.model['file_type']}); "
        f"streamed weights per forward pass {r.model['streamed_weight_bytes'] / 2**20:.1f} MiB "
        f"({r.model['streamed_weight_bytes_per_param']:.3f} bytes/param).",
        f"Engine: llama.cpp {r.engine.get('version')} (release {r.engine.get('release') or 'unknown'}, "
        f"commit {r.engine.get('commit') or 'unknown'}), {s['threads']} threads, "
        f"{r.engine['flags']['parallel']} slots. Prompt {s['prompt_tokens']} tokens; decode: {s['decode_prompt_tokens']}-token "
        f"prompts, {s['output_tokens']} output tokens; {_reps(s)}. Host load average (1 min) "
        f"{s['load_average_1m_before_after'][0]:.1f} before, {_f1(s['load_average_1m_before_after'][1])} after"
        + (f"; the whole loop took {s['loop_wall_s'] / 60:.1f} min{_budget(s)}." if s.get("loop_wall_s") else "."),
        "",
    ]
    if c is None:
        return _tail(r, lines)
    lines += [
        "Calibrated constants (microbench timing core, engine stopped):",
        "",
        f"- C_mm = {c.matmul_flops_per_s / 1e9:.1f} GFLOP/s (torch fp32 at the model's projections, {c.threads} threads)",
        f"- B_ws = {c.read_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read of {c.working_set_bytes / 2**20:.0f} MiB, the decode working set)",
    ]
    if c.cpu_share is not None:
        lines.append(f"- the calibration got {c.cpu_share:.0%} of its {c.threads} cores" + (" (CONTENDED: the constants understate this host)"
                                                                                         if c.cpu_share < 0.85 else ""))
    if c.dram_bandwidth_bytes_per_s:
        lines.append(f"- B_dram = {c.dram_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read of {c.dram_buffer_bytes / 2**20:.0f} MiB, "
                     f"4× the {c.llc_bytes / 2**20:.0f} MiB LLC; reference only)")
    lines += _served(r) + _windows(r) + _steps(r)
    if not r.comparisons:
        return _tail(r, lines)
    lines += [
        "",
        "### Isolated stages (Chapter 9 roofline)",
        "",
        "| quantity | predicted | measured (engine) | measured (client) | error | bound | compute term | memory term | engine CPU share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r.comparisons:
        lines.append(f"| {x.quantity} | {_fmt(x.quantity, x.predicted)} | {_fmt(x.quantity, x.measured)} | "
                     f"{_fmt(x.quantity, x.measured_client)} | {x.error_pct:+.0f}% | {x.bound} | "
                     f"{x.compute_s * 1e3:.2f} ms | {x.memory_s * 1e3:.2f} ms | "
                     f"{'—' if x.engine_cpu_share is None else f'{x.engine_cpu_share:.0%}'}{' (contended)' if x.contended else ''} |")
    lines += ["", "Which term is wrong:", ""]
    lines += [f"- {x.quantity}: {x.verdict}" for x in r.comparisons]
    # the per-run cross-check of the client against the engine
    pre = [k for k in r.checks if k.phase == "prefill" and k.ttft_minus_engine_prompt_s is not None]
    mism = [k for k in r.checks if k.chunks_minus_usage not in (0, None)]
    lines += ["", "Client vs engine (every request):", ""]
    if pre:
        d = [k.ttft_minus_engine_prompt_s * 1e3 for k in pre]
        lines.append(f"- TTFT − engine prompt time: median {statistics.median(d):.1f} ms, range {min(d):.1f}…{max(d):.1f} ms over {len(d)} prefill requests")
    with_usage = [k for k in r.checks if k.usage_completion_tokens is not None]
    stopped = sum(1 for k in r.checks if k.stopped)
    lines.append(f"- streamed chunks vs usage.completion_tokens: {len(mism)} of {len(with_usage)} requests with usage differ"
                 + (f" ({', '.join(f'{k.phase}#{k.rep}: {k.chunks_minus_usage:+d}' for k in mism[:6])})" if mism else "")
                 + (f"; {stopped} stopped by the client (the decodes beside a mixed prompt, once it was done) have none"
                    if stopped else ""))
    eu = [k for k in with_usage if k.engine_predicted_tokens is not None and k.usage_completion_tokens != k.engine_predicted_tokens]
    lines.append(f"- usage.completion_tokens vs timings.predicted_n: {len(eu)} of {len(with_usage)} requests with usage differ")
    return _tail(r, lines)


def _budget(s: dict[str, Any]) -> str:
    """' (budget 15.0 min, planned 14.2 min)' from settings["time_budget"] (harness.loop.budget), else ''."""
    b = s.get("time_budget")
    if not b:
        return ""
    return f" (budget {b['budget_s'] / 60:.1f} min, planned {b['predicted_s'] / 60:.1f} min)"


def _reps(s: dict) -> str:
    """The stage repetitions: --reps, or each window's when they differ (LoopOptions.window_reps; a run stored before
    has only --reps)."""
    per = s.get("stage_reps") or [s["reps"]]
    if len(set(per)) == 1:
        return f"{per[0]} repetitions (median)"
    return f"{per[0]} repetitions (median) in stage window 1, {per[1]} in later windows"


def _tail(r: LoopReport, lines: list[str]) -> str:
    if r.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in r.notes]
    if r.run_dir:
        lines += ["", f"Stored: `{r.run_dir}`"]
    return "\n".join(lines) + "\n"


def _f1(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def _v(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric.endswith("_per_s") or metric == "capacity_rps":
        return f"{v:.3f}/s"
    return f"{v * 1e3:.0f} ms" if v < 10 else f"{v:.1f} s"


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1e3:.1f} ms"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:+.0f}%"


def _steps(r: LoopReport) -> list[str]:
    """Engine iterations reconstructed from the chunk stamps of every measured point, against the twin's (diagnostic)."""
    if not r.served_steps:
        return []
    lines = ["", "### Served steps: the engine's iterations reconstructed from the streams, against the twin's (diagnostic)", "",
             "Tokens of one iteration reach the client together; the gap to the next group is the iteration (harness/loop/"
             "iterations.py). The twin's simulated tokens for the same requests go through the same reconstruction. The "
             "median is the plain step at that batch; the mean also carries the prompt chunks that rode in an iteration "
             "(mixed steps). Nothing here feeds the prediction.", "",
             "| mix | batch | engine iterations | engine median | twin median | error | engine mean | twin mean | error | time share engine / twin |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in r.served_steps:
        lines.append(f"| {x.mix} | {x.batch} | {x.engine_n} (twin {x.twin_n}) | {_ms(x.engine_median_s)} | {_ms(x.twin_median_s)} | "
                     f"{_pct(x.median_error_pct)} | {_ms(x.engine_mean_s)} | {_ms(x.twin_mean_s)} | {_pct(x.mean_error_pct)} | "
                     f"{x.engine_share:.0%} / {x.twin_share:.0%} |")
    return lines


def _windows(r: LoopReport) -> list[str]:
    """The stage windows (harness.loop.windows): when each was measured and what it measured, with the spread."""
    ws = r.stage_windows
    if len(ws) < 2:
        return []
    batches = sorted({int(b) for w in ws for b, _ in w.get("decode_step_s_by_batch") or ()})
    mixed = sorted({(int(b), int(n)) for w in ws for b, n, _ in w.get("mixed_prompt_s") or ()})
    p = r.settings.get("prompt_tokens")
    lines = ["", "### Stage windows: the isolated stages measured again between the served points", "",
             "Each window corrects the twin on its own; every served point is predicted from the median of all windows' "
             "corrections (made after the points ran; nothing served enters the corrections).", "",
             f"| window | began | after served point | requests | took | {p}-token prefill (engine) | "
             + " | ".join([f"decode step B={b} (client)" for b in batches] + [f"{n}-token prompt beside {b} decode{'s' if b > 1 else ''} (engine; over the same alone just before)" for b, n in mixed])
             + " |", "|---|---|---|---|---|---|" + "---|" * (len(batches) + len(mixed))]

    def dec(w: dict[str, Any], b: int) -> float | None:
        return dict((int(k), v) for k, v in w.get("decode_step_s_by_batch") or ()).get(b)

    def mix(w: dict[str, Any], cell: tuple[int, int], key: str = "mixed_prompt_s") -> float | None:
        return {(int(b), int(n)): v for b, n, v in w.get(key) or ()}.get(cell)

    def mix_cell(w: dict[str, Any], cell: tuple[int, int]) -> str:
        extra = mix(w, cell, "mixed_extra_s")
        return _ms(mix(w, cell)) + ("" if extra is None else f" ({extra * 1e3:+.0f})")

    for w in ws:
        after = "— (before them)" if w.get("after_point") is None else str(int(w["after_point"]) + 1)
        lines.append(f"| {int(w['index']) + 1} | {w['started_s'] / 60:.1f} min | {after} | {w['requests']} | {w['duration_s']:.0f} s | "
                     f"{_ms(w.get('prefill_prompt_s'))} | "
                     + " | ".join([_ms(dec(w, b)) for b in batches] + [mix_cell(w, c) for c in mixed]) + " |")
    sp = ([repeat_spread_pct([w.get("prefill_prompt_s") for w in ws])] + [repeat_spread_pct([dec(w, b) for w in ws]) for b in batches]
          + [repeat_spread_pct([mix(w, c) for w in ws]) for c in mixed])
    lines.append("| spread (max − min over the median) | | | | | " + " | ".join("—" if x is None else f"{x:.0f} %" for x in sp) + " |")
    if r.window_verdicts:
        names = {"all": "every window (the prediction above)", "bracketing": "the windows just before and after each point",
                 "first": "window 1 alone (how the points were planned)"}
        lines += [""] + [f"- verdict with {names.get(m, m)}: " + (f"{d['met']} of {d['judged']} judged figures within target" if d else "nothing judged")
                         for m, d in r.window_verdicts.items()]
    return lines


def _band(c: Any) -> str:
    if c.band_lo is None or c.band_hi is None:
        return "—"
    w = c.within_band
    return f"{_v(c.metric, c.band_lo)} – {_v(c.metric, c.band_hi)}" + ("" if w is None else " ✓" if w else " ✗")


def _cond(c: Any) -> str:
    if c.cond_lo is None or c.cond_hi is None:
        return "—"
    return f"{_v(c.metric, c.cond_lo)} – {_v(c.metric, c.cond_hi)}" + (" ill-conditioned" if c.ill_conditioned else "")


def _meas_interval(c: Any) -> str:
    """The measured median's interval; when it is wider than the target, about how many requests would pin it."""
    if c.meas_lo is None or c.meas_hi is None:
        return "—"
    text = f"{_v(c.metric, c.meas_lo)} – {_v(c.metric, c.meas_hi)}"
    if c.measured_precise is not False:
        return text
    need = c.requests_to_pin
    if need is None:
        return text + " (wider than the target)"
    return text + f" (wider than the target; ~{min(need, 10_000):,}{'+' if need > 10_000 else ''} requests would pin it)"


def _speed(c: Any) -> str:
    if c.at_speed is None or c.speed_scale is None:
        return "—"
    ok = c.met_at_speed
    return f"×{c.speed_scale:.3f}: {_v(c.metric, c.at_speed)}" + ("" if ok is None else " ✓" if ok else " ✗")


def _sentinel(c: Any) -> str:
    if c.at_sentinel is None or c.sentinel_scale is None:
        return "—"
    ok = c.met_at_sentinel
    return f"×{c.sentinel_scale:.3f}: {_v(c.metric, c.at_sentinel)}" + ("" if ok is None else " ✓" if ok else " ✗")


def _served(r: LoopReport) -> list[str]:
    """The served-load tables: capacity per mix, then every point's predicted vs measured figures."""
    if not r.served:
        return []
    lines = ["", "### Served load: the digital twin (simulated) against the engine under the load generator", ""]
    if r.twin and r.twin.get("engine") != "llama.cpp":
        st = r.twin.get("settings", {})
        lines.append(f"Twin: {r.twin.get('engine')} scheduler, up to {st.get('max_num_seqs')} running requests, "
                     f"{st.get('max_num_batched_tokens')} tokens a step, prefill and decode {'mixed' if st.get('mixed') else 'in separate steps'}, "
                     f"prefix caching {'on' if st.get('prefix_caching') else 'off'}; step times: {r.twin.get('source')}.")
        lines += [f"- assumed: {a}" for a in st.get("assumptions", [])]
    elif r.twin:
        st = r.twin.get("settings", {})
        lines.append(f"Twin: llama-server scheduler with {st.get('slots')} slots, slot context {r.twin.get('settings', {}).get('n_ctx_slot', '—')}, "
                     f"-b {st.get('batch_size')} / -ub {st.get('ubatch_size')}, continuous batching {'on' if st.get('cont_batching') else 'off'}, "
                     f"unified KV {'on' if st.get('kv_unified') else 'off'}, SWA checkpoints {'on' if st.get('swa_checkpoints') else 'off'}; "
                     f"step times: {r.twin.get('source')}.")
    if r.capacity:
        how = ("output tokens/s between the 20th and 80th percentile completion of the capacity burst the loop sends, over "
               "the mean output"
               if any("burst_requests" in c for c in r.capacity.values()) else "a long simulated backlog")
        lines += ["", f"Predicted capacity (throughput at saturation, simulated; {how}): " + "; ".join(
            f"{mix}: {c['requests_per_s']:.3f} req/s = {c['output_tokens_per_s']:.1f} output tokens/s" for mix, c in r.capacity.items()), ""]
    banded = any(c.band_lo is not None for c in r.served_comparisons)
    conditioned = any(c.cond_lo is not None for c in r.served_comparisons)
    sped = any(c.at_speed is not None for c in r.served_comparisons)
    sent = any(c.at_sentinel is not None for c in r.served_comparisons)
    spanned = any(c.meas_lo is not None for c in r.served_comparisons)
    lines += ["| mix | rate | × capacity | n | held-out | metric | predicted | measured | error | target | "
              + (f"measured median, {MEASURED_MEDIAN_CONFIDENCE:.0%} interval | " if spanned else "")
              + ("single windows' predictions (measured within target of them?) | " if banded else "")
              + (f"twin at ±{CONDITION_STEP_PCT:g} % step time | " if conditioned else "")
              + ("twin at the host sentinel's speed (held out: host telemetry, no served data) | " if sent else "")
              + ("twin at the point's own speed (diagnostic, not held out) | " if sped else "") + "engine CPU share |",
              "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if spanned else "") + ("---|" if banded else "")
              + ("---|" if conditioned else "") + ("---|" if sent else "") + ("---|" if sped else "") + "---|"]
    n_by = {(p.mix, p.point): p.requests for p in r.served}
    for c in r.served_comparisons:
        err = "—" if c.error_pct is None else f"{c.error_pct:+.1f}%"
        tgt = "—" if c.target_pct is None else (f"±{c.target_pct:g}% " + ("✓" if c.met else "✗" if c.met is False else "(not judged)"))
        share = "—" if c.engine_cpu_share is None else f"{c.engine_cpu_share:.0%}" + (" (contended)" if c.contended else "")
        burst = not math.isfinite(c.rate_per_s)
        n = int((r.capacity.get(c.mix) or {}).get("burst_requests", 0)) if burst else n_by.get((c.mix, c.point), "—")
        rate = "all at once" if burst else f"{c.rate_per_s:.3f}/s"
        frac = "∞" if burst else f"{c.rate_fraction_of_capacity:.2f}"
        lines.append(f"| {c.mix} | {rate} | {frac} | {n or '—'} | "
                     f"{'yes' if c.held_out else 'no (fit)'} | {c.metric} | {_v(c.metric, c.predicted)} | {_v(c.metric, c.measured)} | "
                     f"{err} | {tgt} | " + (f"{_meas_interval(c)} | " if spanned else "") + (f"{_band(c)} | " if banded else "")
                     + (f"{_cond(c) if c.target_pct is not None else '—'} | " if conditioned else "")
                     + (f"{_sentinel(c) if c.target_pct is not None else '—'} | " if sent else "")
                     + (f"{_speed(c) if c.target_pct is not None else '—'} | " if sped else "") + f"{share} |")
    seen: set[tuple[str, int]] = set()
    for c in r.served_comparisons:
        if not c.note or (c.mix, c.point) in seen:
            continue
        seen.add((c.mix, c.point))
        where = "capacity" if c.metric == "capacity_rps" else f"@ {c.rate_per_s:.3g} req/s"
        lines.append(f"\n- {c.mix} {where}: {c.note}")
    probes = [p for p in r.served if p.step_scale != 1.0]
    if probes:
        lines += ["", "Host speed probe before each point (the twin's iterations × probe / reference for that point): " + "; ".join(
            f"{p.mix} × {p.rate_fraction_of_capacity:.2f}: {p.step_scale:.3f}" for p in probes)
            + "".join(f"; {mix} capacity: {c['step_scale']:.3f}" for mix, c in r.capacity.items() if "step_scale" in c) + "."]
    v = r.verdict
    if v is not None:
        head = (f"{v.met} of {v.judged} judged figures within target" if v.judged else
                "NO VERDICT: no figure could be judged (every point contended, cut at its drain limit, not held out or "
                "without a completed request: see the notes above), so this run says nothing about the targets")
        lines += ["", f"Verdict on held-out, uncontended points: {head}; "
                      f"{v.contended_points} of {v.points} points were contended (the engine got < 85 % of its cores while it had work) "
                      "and are excluded."]
        lines += [f"- outside target: {f}" for f in v.failures]
        bs = band_summary(list(r.served_comparisons))
        if bs is not None and bs[0]:
            lines += [f"- of these {bs[0]}, {bs[1]} are within target of some single stage window's prediction (host drift "
                      f"between the windows), {bs[2]} outside them all"]
        cs = condition_summary(list(r.served_comparisons))
        if cs is not None:
            lines += [f"- conditioning: of the {cs.misses} outside target, {cs.ill_conditioned_misses} are ill-conditioned (±{CONDITION_STEP_PCT:g} % "
                      f"of every step time moves the twin's own prediction past the target); the well-conditioned judged figures: "
                      f"{cs.well_conditioned_met} of {cs.well_conditioned_judged} within target"]
        sn = speed_summary(list(r.served_comparisons), source="sentinel")
        if sn is not None:
            lines += [f"- host sentinel (held out: a memory-bound read timed on its own CPU clock beside the engine, no served "
                      f"data): with every step time × the sentinel's speed during each point over the stage windows' "
                      f"(×{sn.scale_lo:.3f} … ×{sn.scale_hi:.3f}), {sn.met_at_speed} of {sn.judged} judged figures within "
                      f"target; of the {sn.misses} outside as predicted, {sn.misses_met_at_speed} are within it there"]
        ss = speed_summary(list(r.served_comparisons))
        if ss is not None:
            lines += [f"- host speed (a diagnostic, not held out): with each point's own speed fitted on its requests' E2E "
                      f"(×{ss.scale_lo:.3f} … ×{ss.scale_hi:.3f}), {ss.met_at_speed} of {ss.judged} judged figures would be "
                      f"within target; of the {ss.misses} outside, {ss.misses_met_at_speed} are explained by the host's speed "
                      f"during their point, {ss.misses - ss.misses_met_at_speed} by no single speed"]
        ps = precision_summary(list(r.served_comparisons))
        if ps is not None:
            lines += [f"- measurement precision ({MEASURED_MEDIAN_CONFIDENCE:.0%} distribution-free interval): {ps.counts_text()}"]
        rs = repeatability_summary(list(r.served_comparisons))
        if rs is not None:
            lines += [f"- repeatability (the engine against itself, not a prediction): {rs.counts_text()}"]
    return lines

