"""bench-pd report: measured throughput, latency distributions, goodput and queue depth beside the model's predictions.

Reads one load run (results/<machine>/<run_id>/: manifest, summary.json, plan.json, prediction.json, the
requests, server_metrics and target_emits tables) and writes report.html (self-contained: matplotlib PNGs
embedded as base64) and summary.md. It never measures.

The model column depends on the target:
- the embedded (simulated) target is the scenario's deployment, so its prediction is the plan stored with
  the run: PD capacity μ_PD and its allocation (§9.2.3, example 9.2), colocated and chunked capacities, the
  TTFT floor d_P + T_KV, the decode step time, and the startup drain of §9.6.1 ("model (Chapter 9)");
- a real target is predicted by its digital twin when the run was given --calibration (prediction.json,
  harness.target.prediction): "twin prediction (simulated)", each figure with its error (predicted −
  measured) / measured. Without one the column says "no prediction for this target" and how to make one;
  the scenario's GPU plan is then shown only in its own section, labelled as not a prediction of the target.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.model import queueing
from harness.outdir import writable_dir
from harness.report.load_extras import extras_sections
from harness.report.renderer import ReportOptions, RunSource
from harness.served import MetricComparison, fmt_error_pct
from harness.target.prediction import PREDICTION_FILE, SIMULATED_LABEL, NoPrediction, TargetPrediction, compare_prediction
from harness.units import fmt_ms, fmt_num
from workloads.preflight import SIMULATED_HEADER_NAME
from workloads.headline import goodput_text, left_out_text, throughput_label, throughput_text, window_text
from workloads.summary import LoadSummary, read_summary

RUN_KINDS = ("load",)


_ms, _num = fmt_ms, fmt_num


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _model_facts(plan: dict[str, Any] | None, engine: dict[str, Any]) -> dict[str, Any]:
    """Predictions the report compares against, all from the stored plan (read through StoredPlan)."""
    if not plan:
        return {}
    from harness.model.plan_records import StoredPlan
    from harness.model.record import as_json

    p = StoredPlan.from_json(plan)
    out: dict[str, Any] = {"arrival_rate_per_s": p.workload.arrival_rate_per_s,
                           "output_tokens": p.workload.output_tokens,
                           "colocated_requests_per_s": p.colocated.requests_per_s,
                           "chunked_requests_per_s": p.chunked_colocated.requests_per_s}
    best = p.pd_best
    if best is not None:
        out["pd_requests_per_s"] = best.requests_per_s
        out["pd_bound"] = best.bound
        out["pd_prefill"] = dict(best.prefill)
        out["pd_decode"] = dict(best.decode)
        p_gpus = [g for g, n in best.prefill.items() if n]
        d_gpus = [g for g, n in best.decode.items() if n]
        t_kv = p.kv.transfer_s or 0.0
        out["ttft_floor_s"] = min(p.prefill_s_per_request[g] for g in p_gpus) + t_kv
        out["decode_step_s"] = min(p.decode_step_s[g] for g in d_gpus)
        out["kv_transfer_s"] = t_kv
    out["drain"] = as_json(p.drain)
    out["startup"] = as_json(p.startup)
    return out


def _timing_error(req: Any, emits: Any) -> dict[str, Any] | None:
    """Client first-token arrival − target's emit time of token 0, matched by response id (same host clock)."""
    if emits is None or len(emits) == 0 or "response_id" not in req:
        return None
    first = emits[emits["token_index"] == 0].set_index("response_id")["emit_ns"]
    ok = req[(req["error_class"] == "ok") & req["response_id"].notna()]
    joined = ok.join(first, on="response_id", how="inner")
    if len(joined) == 0:
        return None
    err = (joined["first_token_ns"].astype(float) - joined["emit_ns"].astype(float)) / 1e9
    return {"count": int(len(err)), "p50_s": float(np.percentile(err, 50)), "p99_s": float(np.percentile(err, 99)),
            "max_s": float(err.max()), "min_s": float(err.min())}


def render(run: RunSource, out_dir: str | Path, options: ReportOptions | None = None) -> list[Path]:
    """Write report.html and summary.md for a bench-pd run; returns the paths written (no option is used)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.store import Run

    if isinstance(run, (list, tuple)):
        if len(run) != 1:
            raise HarnessError("the bench-pd report takes exactly one run.")
        run = run[0]
    if not isinstance(run, Run):
        run = Run(run)
    out = writable_dir(out_dir, "--to / --report-dir", "report directory")
    m = run.manifest
    tables = run.tables()
    if "requests" not in tables:
        raise HarnessError(f"run {run.path} has no requests table; it is not a load run (or it measured nothing).")
    req = run.table("requests")
    metrics = run.table("server_metrics") if "server_metrics" in tables else None
    emits = run.table("target_emits") if "target_emits" in tables else None
    side = read_summary(run)  # a run killed before its summary.json is summarised from its stored requests table
    summary = side.load
    try:
        plan = run.json("plan.json")
    except FileNotFoundError:
        plan = None
    engine = m.engine or {}
    simulated = bool(engine.get("simulated"))
    plan_facts = _model_facts(plan, engine)
    # the plan predicts the target only when the target is the scenario's emulated deployment; for any other target
    # (real, or a simulated one of another deployment) the scenario's GPU plan predicts nothing (its own section below)
    plan_predicts = plan_describes_target(engine, m.extra.get("scenario"))
    facts = plan_facts if plan_predicts else {}
    pred = None if plan_predicts else _prediction(run)
    startup_s = float(engine.get("startup_s", facts.get("startup", {}).get("startup_s", 0.0)) or 0.0) if plan_predicts else 0.0
    ok = req[req["error_class"] == "ok"]
    span = side.span_s
    closed = summary.load_mode == "closed-loop"
    w0, w1 = summary.window_start_s, summary.window_end_s
    in_win = latency_sets(req, summary)["window"]  # the requests the table's latency figures cover
    figs: dict[str, str] = {}

    # latency distributions: the window's requests (the table's set), and every successful request beside them
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, col, label, ref, ref_label in (
        (axes[0], "ttft_s", "TTFT (s)", facts.get("ttft_floor_s"), "model floor d_P + T_KV"),
        (axes[1], "tpot_s", "TPOT (s)", facts.get("decode_step_s"), "model step at batch 32"),
    ):
        for sel, name, style in ((ok, f"all successful ({len(ok)}, start-up included)", {"color": "0.6", "ls": ":"}),
                                 (in_win, f"sent in the window ({len(in_win)}: the table)", {"color": "C0"})):
            x = np.sort(sel[col].dropna().to_numpy(dtype=float))
            if x.size:
                ax.plot(x, np.arange(1, x.size + 1) / x.size, label=name, **style)
        if ref:
            ax.axvline(ref, color="C3", ls="--", label=ref_label)
        twin_ref = getattr(pred.figures if pred else None, f"{col[:-2]}_p50_s", None)
        if twin_ref:
            ax.axvline(twin_ref, color="C1", ls="--", label="twin prediction p50 (simulated)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    itl = np.concatenate([np.diff(np.asarray(c, dtype=float)) / 1e9 for c in in_win["chunk_ns"] if len(c) > 1] or [np.zeros(0)])
    if itl.size:
        axes[2].hist(itl * 1e3, bins=80, log=True)
    if facts.get("decode_step_s"):
        axes[2].axvline(facts["decode_step_s"] * 1e3, color="C3", ls="--")
    if pred and pred.figures.tpot_p50_s:
        axes[2].axvline(pred.figures.tpot_p50_s * 1e3, color="C1", ls="--")
    axes[2].set_xlabel("ITL (ms), requests sent in the window")
    axes[2].set_ylabel("chunks")
    fig.suptitle(("SIMULATED target — " if simulated else "") + "latency distributions (successful requests)")
    figs["latency"] = _png(fig)

    # throughput over time
    fig, ax = plt.subplots(figsize=(13, 3.4))
    chunks = np.concatenate([np.asarray(c, dtype=float) for c in req["chunk_ns"]] or [np.zeros(0)]) / 1e9
    if chunks.size:
        edges = np.arange(0.0, max(chunks.max(), 1.0) + 1.0, 1.0)
        cnt, _ = np.histogram(chunks, bins=edges)
        ax.step(edges[:-1], cnt, where="post", label="measured output tokens/s (1 s bins)")
    if facts.get("pd_requests_per_s"):
        ax.axhline(facts["pd_requests_per_s"] * facts["output_tokens"], color="C3", ls="--", label="model μ_PD × output tokens")
        if not closed:
            ax.axhline(facts["arrival_rate_per_s"] * facts["output_tokens"], color="C2", ls=":", label="arrival rate × output tokens")
    if pred:
        ax.axhline(pred.figures.output_tokens_per_s, color="C1", ls="--", label="twin prediction, window (simulated)")
    _shade_window(ax, w0, w1)
    ax.set_xlabel("time since t0 (s)")
    ax.set_ylabel("tokens/s")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a real target with nothing streamed has no line to name
        ax.legend(fontsize=8)
    figs["throughput"] = _png(fig)

    # queue depth over time, with the fluid model of §9.6.1; "all" drawn wide and pale under the pools' thin lines, so
    # both stay visible where they coincide (a PD deployment's waiting requests are its prefill pool's)
    fig, ax = plt.subplots(figsize=(13, 3.4))
    if metrics is not None and len(metrics):
        for role, style in (("all", {"lw": 5, "alpha": 0.35, "color": "C0"}), ("prefill", {"lw": 1.2, "color": "C1"}),
                            ("decode", {"lw": 1.2, "color": "C4", "ls": ":"})):
            q = metrics[(metrics["metric"] == "queue_depth") & (metrics["role"] == role)].sort_values("t_s")
            if len(q):
                ax.plot(q["t_s"], q["value"], label=f"measured waiting ({role})", **style)
        r = metrics[(metrics["metric"] == "running") & (metrics["role"] == "all")].sort_values("t_s")
        if len(r):
            ax2 = ax.twinx()
            ax2.plot(r["t_s"], r["value"], color="0.6", lw=0.8, label="measured running (right axis)")
            ax2.set_ylabel("requests running")
            ax2.legend(fontsize=8, loc="lower right")
    lam = None if closed else facts.get("arrival_rate_per_s")
    if lam:
        t = np.linspace(0, max(span, 1.0) * 1.1, 400)
        for name, mu_key in (("pd", "pd_requests_per_s"), ("chunked", "chunked_requests_per_s"), ("replicas", "colocated_requests_per_s")):
            mu = facts.get(mu_key)
            if mu:
                ax.plot(t, queueing.queue_length(lam, startup_s, mu, t), ls="--", lw=1, label=f"fluid model, {name} μ={mu:.2f}/s")
    _shade_window(ax, w0, w1)
    ax.set_xlabel("time since t0 (s)")
    ax.set_ylabel("requests waiting")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a real target without /metrics has no line to name
        ax.legend(fontsize=8)
    figs["queue"] = _png(fig)

    # latency from the intended send over the run (shows the startup backlog)
    fig, ax = plt.subplots(figsize=(13, 3.4))
    ax.scatter(ok["intended_ns"].astype(float) / 1e9, ok["ttft_from_intended_s"], s=6, label="TTFT from intended send")
    bad = req[req["error_class"] != "ok"]
    if len(bad):
        ax.scatter(bad["intended_ns"].astype(float) / 1e9, np.zeros(len(bad)), s=12, marker="x", color="C3", label="errors")
    _shade_window(ax, w0, w1)
    ax.set_xlabel("intended send (s since t0)")
    ax.set_ylabel("s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figs["ttft_time"] = _png(fig)

    queue = _queue_story(metrics)
    terr = _timing_error(req, emits) if simulated else None
    drain_pd = facts.get("drain", {}).get("pd", {})
    thr_model = (f"μ_PD {_num(facts.get('pd_requests_per_s'))} req/s ({facts.get('pd_bound', '—')}-bound)"
                 + ("" if closed else f"; arrival {_num(facts.get('arrival_rate_per_s'))} req/s")
                 + f"; colocated {_num(facts.get('colocated_requests_per_s'))}, chunked {_num(facts.get('chunked_requests_per_s'))}")
    rows: list[tuple[str, str, str]] = [
        ("request throughput (window)", f"{throughput_label(summary)}: {throughput_text(summary)}", thr_model),
        ("request throughput incl. startup and drain (vLLM bench serve)",
         f"{summary.request_throughput_incl_drain_per_s:.3f} req/s over {summary.run_duration_s:.1f} s",
         "every successful completion ÷ (t0 … last completion)"),
        ("output tokens/s", f"{summary.output_tokens_per_s:.0f}",
         f"{_num((facts.get('pd_requests_per_s') or math.nan) * (facts.get('output_tokens') or math.nan), '.0f')} at μ_PD"),
        ("TTFT p50 / p99", f"{_ms(summary.ttft_s.p50)} / {_ms(summary.ttft_s.p99)}",
         f"floor d_P + T_KV = {_ms(facts.get('ttft_floor_s'))} (T_KV {_ms(facts.get('kv_transfer_s'))})"),
        ("TTFT from intended p50 / p99", f"{_ms(summary.ttft_from_intended_s.p50)} / {_ms(summary.ttft_from_intended_s.p99)}", ""),
        ("TPOT p50 / p99", f"{_ms(summary.tpot_s.p50)} / {_ms(summary.tpot_s.p99)}",
         f"decode step at batch 32: {_ms(facts.get('decode_step_s'))} (smaller batches step faster)"),
        ("ITL p50 / p99", f"{_ms(summary.itl_s.p50)} / {_ms(summary.itl_s.p99)}", ""),
        ("E2E p50 / p99", f"{_ms(summary.e2e_s.p50)} / {_ms(summary.e2e_s.p99)}", ""),
        ("goodput (window)", goodput_text(summary),
         "SLO " + ", ".join(f"{k} ≤ {_ms(v)}" for k, v in summary.slo.items() if v is not None)),
        ("waiting queue (scraped /metrics)", queue,
         (f"§9.6.1 fluid model clears the backlog at {_num(drain_pd.get('clear_at_s'), '.1f')} s (PD, μ fixed at μ_PD); "
          f"backlog {_num(facts.get('startup', {}).get('backlog_requests'), '.0f')} requests"
          + (" — the run's schedule ended before that, so arrivals stopped early" if (drain_pd.get('clear_at_s') or 0) > span else ""))
         if drain_pd and not closed else ""),
        ("PD allocation", ", ".join(f"{n}×{g}" for g, n in (engine.get("prefill_gpus") and _count(engine["prefill_gpus"]) or {}).items()) + " → P; "
         + ", ".join(f"{n}×{g}" for g, n in (engine.get("decode_gpus") and _count(engine["decode_gpus"]) or {}).items()) + " → D"
         if simulated and engine.get("mode") == "pd" else ("colocated" if simulated else "external deployment"),
         "model best: P " + ", ".join(f"{n}×{g}" for g, n in (facts.get("pd_prefill") or {}).items() if n)
         + "; D " + ", ".join(f"{n}×{g}" for g, n in (facts.get("pd_decode") or {}).items() if n) if facts.get("pd_prefill") else ""),
    ]
    if closed:  # no schedule: the users send when their previous request ended
        rows.append(("closed loop", f"{summary.requests_sent} requests sent by {_users(m)}"
                     + (f"; the pool ran out at {summary.pool_ran_out_s:.1f} s" if summary.pool_ran_out_s is not None else ""), ""))
    else:
        rows.append(("schedule lag p50 / p99 / max", f"{_ms(summary.schedule_lag_s.p50)} / {_ms(summary.schedule_lag_s.p99)} / "
                     f"{_ms(summary.schedule_lag_s.max)}",
                     f"achieved {summary.achieved_send_rate_per_s:.3f} vs intended {summary.intended_rate_per_s:.3f} req/s"))
    rows += [
        ("errors", ", ".join(f"{k}: {v}" for k, v in summary.errors_by_class.items() if k != "ok" and not (closed and k == "not_sent"))
         or "none", "the pool's unused rest (not_sent) is not an error in a closed loop" if closed else ""),
        ("token counts (usage vs chunks)", f"{summary.token_count_mismatches} mismatches, {summary.usage_missing} without usage", ""),
    ]
    cc = summary.engine_crosscheck
    if cc:
        rows.append(("client TTFT − engine prompt time (per request)",
                     f"p50 {_ms(cc.ttft_minus_engine_prompt_s.p50)}, p99 {_ms(cc.ttft_minus_engine_prompt_s.p99)}",
                     f"{cc.requests} requests with engine timings; engine prompt time p50 {_ms(cc.engine_prompt_s.p50)}; "
                     f"streamed vs engine-counted output tokens differ in {cc.output_tokens_diff_nonzero}"))
    lag = _emulator_lag(emits)
    if lag is not None:
        rows.append(("emulator behind its own schedule (emit log)", f"p50 {_ms(lag[0])}, p99 {_ms(lag[1])}, max {_ms(lag[2])}",
                     "a busy host delays the emulator's tokens; its latencies then include that delay"))
    if terr:
        rows.append(("client TTFT timing error vs target emit log", f"p50 {_ms(terr['p50_s'])}, p99 {_ms(terr['p99_s'])}, max {_ms(terr['max_s'])}",
                     f"{terr['count']} requests matched by response id"))
    validity = "VALID" if summary.valid else "INVALID: " + "; ".join(summary.invalid_reasons)
    validity = f"{m.extra.get('load_mode_label') or summary.load_mode} · {validity}"  # closed-loop runs say so wherever shown
    banner = _banner(m, engine, pred, plan_predicts)
    if not plan_predicts:
        rows = [(a, b, _real_target_cell(a, c, pred, summary)) for a, b, c in rows]
    notes = [f"Note: {n}." for n in summary.notes]
    shape, rate = _shape_mismatch(plan, m), _rate_mismatch(plan, m)
    if plan_predicts and shape:
        notes.append(f"Note: the model column is the scenario's plan for its {shape[0]} requests; this run sent {shape[1]}, so "
                     "its figures are not this run's prediction.")
    if plan_predicts and rate:
        notes.append(f"Note: the model column is the scenario's plan at its arrival rate of {rate[0]:g} req/s; this run offered "
                     f"{rate[1]:.4g} req/s, so its figures are not this run's prediction.")
    differs = [x for x in (shape and f"{shape[0]} requests", rate and f"{rate[0]:g} req/s") if x]
    model_header = ((f"model (Chapter 9, for {' at '.join(differs)}, not this run's)" if differs else "model (Chapter 9)")
                    if plan_predicts else (SIMULATED_LABEL if pred else NoPrediction.reason))
    sections = [] if plan_predicts else [*(_twin_section(pred, summary) if pred else []), *_scenario_plan_section(plan_facts, m)]
    extra_sections, extra_figs = extras_sections(run, req)  # GPU telemetry, prefix reuse, profile window, early stop
    sections += extra_sections
    title = _title(m)

    derived = [f"Note: {side.note}.", ""] if side.derived else []
    if lag is not None and lag[1] > EMULATOR_LAG_NOTE_S:
        notes.append(f"Note: the emulator ran {lag[1] * 1e3:.0f} ms (p99) behind its own schedule: the host was too busy to "
                     "emulate the deployment in time, so the latencies and the window's steadiness describe the host's load "
                     "as much as the deployment.")
    window_line = f"{window_text(summary)[0].upper()}{window_text(summary)[1:]} · {_count_line(summary)}"
    md = [f"# {title}", "", f"**{banner}**", "", f"Run: `{run.path}` · status {m.status} · {validity}", "", *derived,
          window_line, "", *(n for x in notes for n in (x, "")),
          f"| quantity | measured | {model_header} |", "|---|---|---|"]
    md += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    for heading, paragraphs, table in sections:
        md += ["", f"## {heading}", ""]
        for para in paragraphs:
            md += [para, ""]
        if table:
            md += ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
            md += ["| " + " | ".join(r) + " |" for r in table[1:]]
    if plan_predicts:
        md += ["", "The fluid model of §9.6.1 holds the service rate at μ_PD; the emulated D pool batches continuously, so "
               "backlogged requests are admitted into free batch slots and steps lengthen as the batch grows: the waiting queue "
               "and the model's backlog are different quantities, shown side by side.", "", "Figures: report.html (latency CDFs, ITL histogram, tokens/s over time, queue depth vs the §9.6.1 fluid model, "
               "TTFT by send time)."]
    else:
        md += ["", "Figures: report.html (latency CDFs, ITL histogram, tokens/s over time"
               + (" with the twin's predictions (simulated)" if pred else "") + ", queue depth scraped from the target, TTFT by send time)."]
    md_path = out / "summary.md"
    md_path.write_text("\n".join(md) + "\n")

    h = ["<!doctype html><html><head><meta charset='utf-8'><title>", html.escape(title), "</title>",
         "<style>body{font-family:sans-serif;max-width:1300px;margin:auto}td,th{border:1px solid #ccc;padding:4px 8px}"
         "table{border-collapse:collapse}.sim{background:#fff3cd;padding:8px;border:1px solid #e0c060}</style></head><body>",
         f"<h1>{html.escape(title)}</h1>", f"<p class='sim'><b>{html.escape(banner)}</b></p>",
         f"<p>Run <code>{html.escape(str(run.path))}</code> · status {html.escape(m.status)} · <b>{html.escape(validity)}</b></p>",
         *([f"<p>Note: {html.escape(side.note or '')}.</p>"] if side.derived else []),
         f"<p>{html.escape(window_line)}</p>", *(f"<p>{html.escape(n)}</p>" for n in notes),
         f"<table><tr><th>quantity</th><th>measured</th><th>{html.escape(model_header)}</th></tr>"]
    h += [f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>" for a, b, c in rows]
    h.append("</table>")
    for heading, paragraphs, table in sections:
        h.append(f"<h2>{html.escape(heading)}</h2>")
        h += [f"<p>{html.escape(para)}</p>" for para in paragraphs]
        if table:
            h.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in table[0]) + "</tr>")
            h += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in table[1:]]
            h.append("</table>")
    queue_cap = "Queue depth (scraped /metrics) and the §9.6.1 fluid model" if plan_predicts and not closed else "Queue depth (scraped /metrics)"
    for key, cap in (("latency", "Latency distributions: the window's requests (the table) and every successful one"),
                     ("throughput", "Output tokens per second (window shaded)"),
                     ("queue", queue_cap + " (window shaded)"), ("ttft_time", "TTFT by intended send time (window shaded)")):
        h.append(f"<h2>{cap}</h2><img src='data:image/png;base64,{figs[key]}'/>")
    h += [f"<h2>{html.escape(cap)}</h2><img src='data:image/png;base64,{png}'/>" for cap, png in extra_figs]
    h.append("</body></html>")
    html_path = out / "report.html"
    html_path.write_text("".join(h))
    return [html_path, md_path]


EMULATOR_LAG_NOTE_S = 0.05  # an emulator more than this late (p99) behind its own schedule is said beside the headline


def _emulator_lag(emits: Any) -> tuple[float, float, float] | None:
    """(p50, p99, max) seconds by which the embedded target emitted tokens after it had scheduled them."""
    if emits is None or not len(emits) or "scheduled_ns" not in emits:
        return None
    lag = (emits["emit_ns"].to_numpy(dtype=float) - emits["scheduled_ns"].to_numpy(dtype=float)) / 1e9
    return float(np.percentile(lag, 50)), float(np.percentile(lag, 99)), float(lag.max())


def _shape_mismatch(plan: dict[str, Any] | None, m: Any) -> tuple[str, str] | None:
    """("8192/1025-token", "256/32-token") when the run's mean request differs from the scenario's the plan is for."""
    wl = (plan or {}).get("workload") or {}
    run_wl = m.extra.get("workload") or {}
    want = (wl.get("input_tokens"), wl.get("output_tokens"))
    got = (run_wl.get("prompt_tokens_mean"), run_wl.get("max_tokens_mean"))
    if None in want or None in got:
        return None
    if all(abs(float(g) - float(w)) <= 0.01 * float(w) for g, w in zip(got, want)):
        return None
    return f"{want[0]:.0f}/{want[1]:.0f}-token", f"{got[0]:.0f}/{got[1]:.0f}-token"


def _rate_mismatch(plan: dict[str, Any] | None, m: Any) -> tuple[float, float] | None:
    """(the scenario's arrival rate, the run's offered mean rate) when an open-loop run offered another rate than the
    one the plan is for (more than 1 % apart); None for closed loop or when either is unknown."""
    want = ((plan or {}).get("workload") or {}).get("arrival_rate_per_s")
    sched = (m.extra.get("workload") or {}).get("schedule") or {}
    got = sched.get("mean_rate_per_s")
    if want is None or got is None or sched.get("kind") == "closed-loop" or not float(want) > 0:
        return None
    return None if abs(float(got) - float(want)) <= 0.01 * float(want) else (float(want), float(got))


def latency_sets(req: Any, summary: LoadSummary) -> dict[str, Any]:
    """The successful requests the latency plots draw: "window" (sent in the summary's window: the table's set, the
    same as workloads.summary.measured_requests) and "all" (the start-up and drain included)."""
    ok = req[req["error_class"] == "ok"]
    intended_s = ok["intended_ns"].to_numpy(dtype=float) / 1e9
    return {"window": ok[(intended_s >= summary.window_start_s) & (intended_s < summary.window_end_s)], "all": ok}


def plan_describes_target(engine: dict[str, Any], scenario: str | None) -> bool:
    """The target emulates the run's scenario, so the scenario's plan is its prediction: the embedded target, or one
    reached by URL whose /harness/info says it emulates that scenario."""
    if engine.get("name") == "harness-simulated":
        return True
    info = engine.get("info") or {}
    return bool(engine.get("simulated")) and info.get("profile") == "scenario" and info.get("scenario") == scenario


def _banner(m: Any, engine: dict[str, Any], pred: TargetPrediction | None, plan_predicts: bool) -> str:
    if engine.get("name") == "harness-simulated":
        return ("SIMULATED: the target is the harness's embedded emulator (harness.target); its timings come from the "
                "Chapter 9 model, not from a GPU.")
    url = m.extra.get("target_url", "external")
    if m.extra.get("synthetic"):
        out = "SYNTHETIC: records generated from known distributions (harness.compare.synthetic); not a measurement."
    elif engine.get("simulated_by") == "header":
        what = (engine.get("info") or {}).get("profile") or "unknown"
        out = (f"SIMULATED: the target {url} says it is simulated ({SIMULATED_HEADER_NAME}: true; profile {what}); its "
               "timings are an emulator's, not a measurement of hardware.")
    elif engine.get("simulated"):
        out = f"SIMULATED: the run's engine record ({engine.get('name', '?')}) says its timings are simulated, not measured."
    else:
        out = f"Target: {url}"
    if plan_predicts:
        return out + " It emulates the run's scenario, so the model column is the scenario's plan."
    return out + (f" — the model column is its digital twin's prediction (SIMULATED, made before the run from "
                  f"{pred.source.path})" if pred else " — no prediction for this target (see the model column)")


def _title(m: Any) -> str:
    """bench-pd — scenario — run id; a run of plain Locust names itself and its workload instead."""
    bench = m.extra.get("bench") or "load"
    what = m.extra.get("scenario") or (m.extra.get("workload") or {}).get("name") or ""
    if bench == "locust":  # plain Locust: what it ran is its users, not a scenario
        what = m.extra.get("load_mode_label") or m.extra.get("load_mode") or ""
    return " — ".join(x for x in (str(bench), str(what), m.run_id) if x)


def _users(m: Any) -> str:
    lab = m.extra.get("load_mode_label") or ""
    return lab.removeprefix("closed-loop ").strip("()") or f"{m.extra.get('max_concurrency', '?')} users"


def _count_line(s: LoadSummary) -> str:
    """How many requests the run holds and which the figures cover (a closed loop's unused pool is not a request sent)."""
    sent = s.requests_sent if s.requests_sent is not None else s.requests_total
    unused = s.errors_by_class.get("not_sent", 0)
    pool = f" of a pool of {s.requests_total} ({unused} unused)" if s.load_mode == "closed-loop" and unused else ""
    return (f"{sent} requests sent{pool}; {s.requests_measured} sent in the window, {s.requests_ok} of them succeeded "
            f"(the latency figures){left_out_text(s)}")


def _shade_window(ax: Any, w0: float, w1: float) -> None:
    if w1 > w0:
        ax.axvspan(w0, w1, color="0.5", alpha=0.08, label="window")


def _queue_story(metrics: Any, role: str = "all") -> str:
    """What the scraped waiting queue did, read off the same series the queue plot draws: its peak, when it was empty
    again after it, and whether it filled again later."""
    if metrics is None or len(metrics) == 0:
        return "not scraped"
    q = metrics[(metrics["metric"] == "queue_depth") & (metrics["role"] == role)].sort_values("t_s")
    if not len(q):
        return "not scraped"
    t, v = q["t_s"].to_numpy(dtype=float), q["value"].to_numpy(dtype=float)
    if not (v > 0).any():
        return f"never held a waiting request ({len(v)} scrapes)"
    k = int(np.argmax(v))
    after = np.nonzero(v[k:] <= 0)[0]
    if not after.size:
        return f"peak {v[k]:.0f} waiting at {t[k]:.1f} s; still {v[-1]:.0f} waiting at the last scrape ({t[-1]:.1f} s)"
    e = k + int(after[0])
    out = f"peak {v[k]:.0f} waiting at {t[k]:.1f} s; empty from {t[e]:.1f} s"
    later = np.nonzero(v[e:] > 0)[0]
    if later.size:
        j = e + int(np.argmax(v[e:]))
        out += f"; waiting again later, up to {v[j]:.0f} (at {t[j]:.1f} s), last at {t[e + int(later[-1])]:.1f} s"
    return out


def _prediction(run: Any) -> TargetPrediction | None:
    """The twin's prediction stored with a real target's run (None: the run was given no --calibration)."""
    try:
        raw = run.json(PREDICTION_FILE)
    except FileNotFoundError:
        return None
    return TargetPrediction.from_dict(raw, str(run.path / PREDICTION_FILE))


def twin_lines(prediction: dict[str, Any] | None, summary: LoadSummary) -> list[str]:
    """Text lines for a real target's run: the twin's prediction (simulated) against the measured summary, with errors,
    or how to make one (`prediction`: the run's prediction.json document, or None)."""
    if prediction is None:
        return [f"model: {NoPrediction().text()}"]
    pred = TargetPrediction.from_dict(prediction)
    parts = []
    for r in compare_prediction(pred, summary).rows:
        v = _ms(r.predicted) if r.unit == "s" else f"{_num(r.predicted, '.3f' if r.unit == 'req/s' else '.0f')} {r.unit}"
        parts.append(f"{_LABELS[r.metric]} {v} (error {_err(r.error)})")
    return [f"model: {SIMULATED_LABEL} from {pred.source.kind} {pred.source.path}: " + "; ".join(parts),
            f"model: error = (predicted − measured) / measured; saturation capacity {_num(pred.capacity_requests_per_s, '.3f')} "
            "req/s (simulated)", *(f"model note: {n}" for n in pred.notes)]


def _err(e: float | None) -> str:
    return "n/a" if e is None else fmt_error_pct(e)


# how this report names each figure of the twin's comparison (harness.target.prediction.PREDICTION_METRICS)
_LABELS = {"request_throughput_per_s": "request throughput, steady state (window)", "output_tokens_per_s": "output tokens/s (window)",
           "ttft_p50_s": "TTFT p50", "ttft_p90_s": "TTFT p90", "tpot_p50_s": "TPOT p50", "e2e_p50_s": "E2E p50"}


# rows of the main table whose model cell is a figure of the target (the others carry definitions: SLOs, intended rate)
_FIGURE_ROWS = ("request throughput (window)", "request throughput incl. startup and drain (vLLM bench serve)",
                "output tokens/s", "TTFT p50 / p99", "TPOT p50 / p99", "E2E p50 / p99", "waiting queue (scraped /metrics)",
                "PD allocation")


def _real_target_cell(label: str, plan_cell: str, pred: TargetPrediction | None, summary: LoadSummary) -> str:
    """The model cell of a real target's row: the twin's prediction with its error, or no prediction (never the
    scenario's GPU plan, which predicts the scenario's deployment, not this target)."""
    if label not in _FIGURE_ROWS:
        return plan_cell
    if pred is None:
        return NoPrediction().text() if label == _FIGURE_ROWS[0] else "—"
    r: dict[str, MetricComparison] = {row.metric: row for row in compare_prediction(pred, summary).rows}

    def fig(q: str, unit: str = "") -> str:
        row = r[q]
        v = _ms(row.predicted) if row.unit == "s" else _num(row.predicted, ".3f" if row.unit == "req/s" else ".0f")
        return f"{v}{unit} (error {_err(row.error)})"

    cells = {
        _FIGURE_ROWS[0]: f"{fig('request_throughput_per_s', ' req/s')}; saturation capacity "
                         f"{_num(pred.capacity_requests_per_s, '.3f')} req/s at arrival {_num(pred.rate_per_s, '.3f')} req/s",
        "output tokens/s": fig("output_tokens_per_s"),
        "TTFT p50 / p99": f"p50 {fig('ttft_p50_s')}; p90 {fig('ttft_p90_s')} against the measured p90 {_ms(r['ttft_p90_s'].measured)}",
        "TPOT p50 / p99": f"p50 {fig('tpot_p50_s')}",
        "E2E p50 / p99": f"p50 {fig('e2e_p50_s')}",
    }
    return cells.get(label, "—")


def _twin_section(pred: TargetPrediction, summary: LoadSummary) -> list[tuple[str, list[str], list[list[str]]]]:
    src = pred.source
    table = [["quantity", SIMULATED_LABEL, "measured", "error (predicted − measured) / measured"]]
    for r in compare_prediction(pred, summary).rows:
        f = (lambda v: _ms(v)) if r.unit == "s" else (lambda v, u=r.unit: f"{_num(v, '.3f' if u == 'req/s' else '.0f')} {u}")
        table.append([_LABELS[r.metric], f(r.predicted), f(r.measured), _err(r.error)])
    table.append(["saturation capacity", f"{_num(pred.capacity_requests_per_s, '.3f')} req/s, "
                  f"{_num(pred.capacity_output_tokens_per_s, '.0f')} output tokens/s", "not measured by this run", ""])
    paras = [f"SIMULATED: the twin ran this run's workload ({pred.requests} requests, arrival {pred.rate_per_s:.3f} req/s, "
             f"window [{pred.window_start_s:g}, {pred.window_end_s:g}) s of intended sends, the load generator's definitions) in "
             f"simulated time before the load was sent ({pred.compute_s:.2f} s of computation).",
             f"Twin: {src.engine} scheduler, model {src.model}; step times: {src.step_times}. Made from {src.kind} {src.path}"
             + (f" with engine config {src.engine_config}" if src.engine_config else "")
             + (f"; measured on {src.machine}" if src.machine else "") + ("; PROXY allowed" if src.proxy else "") + "."]
    paras += [f"Note: {n}." for n in pred.notes]
    return [("Twin prediction (simulated) against the measurement", paras, table)]


def _scenario_plan_section(facts: dict[str, Any], m: Any) -> list[tuple[str, list[str], list[list[str]]]]:
    if not facts.get("pd_requests_per_s"):
        return []
    return [("The scenario's GPU plan (Chapter 9) — not a prediction of this target",
             [f"The workload's shapes and rate come from scenario {m.extra.get('scenario', '?')}; its plan (plan.json) is for the "
              f"scenario's GPU deployment, not for this target: μ_PD {_num(facts.get('pd_requests_per_s'))} req/s "
              f"({facts.get('pd_bound', '—')}-bound), TTFT floor d_P + T_KV {_ms(facts.get('ttft_floor_s'))}, decode step at "
              f"batch 32 {_ms(facts.get('decode_step_s'))}."], [])]


def _count(gpus: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in gpus:
        out[g] = out.get(g, 0) + 1
    return out
