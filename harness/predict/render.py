"""Text of `harness predict` and `harness validate silicon` (the JSON is the records' to_dict)."""

from __future__ import annotations

from harness.predict.point import PredictedPoint
from harness.predict.silicon import ErrorStats, GroupSummary, SiliconValidation
from harness.units import fmt_ms, fmt_num, fmt_pct


def render_point(p: PredictedPoint) -> str:
    lines = [
        f"SIMULATED prediction ({p.engine} twin in simulated time; nothing was measured)",
        f"deployment  {p.model} {p.precision} (KV {p.kv_dtype}) on {p.gpus} × {p.gpu}, {p.mode}: {p.layout}",
        f"workload    {p.workload}",
        f"constants   {p.calibration}",
        "",
        f"{'':14s} {'mean':>10s} {'p50':>10s} {'p90':>10s} {'p99':>10s}",
    ]
    for name, d in (("TTFT", p.ttft_s), ("TPOT", p.tpot_s), ("E2E", p.e2e_s)):
        lines.append(f"{name:14s} {fmt_ms(d.mean):>10s} {fmt_ms(d.p50):>10s} {fmt_ms(d.p90):>10s} {fmt_ms(d.p99):>10s}")
    lines += [
        "",
        f"throughput  {p.request_throughput_per_s:.3g} req/s, {p.output_tokens_per_s:.4g} output tok/s "
        f"({p.request_throughput_per_gpu_s:.3g} req/s and {p.output_tokens_per_gpu_s:.4g} output tok/s per GPU)",
    ]
    if p.kv is not None:
        k = p.kv
        cap = "YES: KV memory caps the batch" if k.capped else "no"
        lines.append(f"KV cache    {k.tokens_per_instance:,.0f} tokens per instance ({k.batch_limit} whole requests); "
                     f"peak running {k.peak_running} of {k.max_running}; capped: {cap}"
                     + (f", {k.preemptions} preemptions" if k.preemptions else ""))
        lines.append(f"memory      {k.memory}")
    if p.rejected:
        lines.append(f"REJECTED    {p.rejected} requests were refused by the engine (see notes)")
    if p.notes:
        lines.append("notes:")
        lines += [f"  - {n}" for n in p.notes]
    lines.append(f"(simulated {p.events:,} events in {p.compute_s:.2f} s)")
    return "\n".join(lines)


def _e(s: ErrorStats) -> str:
    return f"{fmt_pct(s.median_abs, 1, missing='—'):>7s} {fmt_pct(s.p90_abs, 1, missing='—'):>7s}"


def render_validation(v: SiliconValidation) -> str:
    head = (f"{'engine':7s} {'model':34s} {'mode':6s} {'rows':>4s} {'ours':>4s} {'aic':>4s} | "
            f"{'TTFT ours':>15s} {'TTFT aic':>15s} | {'TPOT ours':>15s} {'TPOT aic':>15s}")
    sub = f"{'':7s} {'':34s} {'':6s} {'':>4s} {'':>4s} {'':>4s} | " + " ".join([f"{'med':>7s} {'p90':>7s}"] * 2) + " | " + \
        " ".join([f"{'med':>7s} {'p90':>7s}"] * 2)
    lines = [f"harness validate silicon --system {v.system}: |relative error| of mean TTFT and TPOT per row (SIMULATED "
             "predictions against measured serving runs)",
             f"rows from {v.csv}", f"our constants: {v.calibration}", "", head, sub]

    def row(g: GroupSummary) -> str:
        return (f"{g.engine:7s} {g.model[:34]:34s} {g.mode:6s} {g.rows:4d} {g.predicted:4d} {g.aic_predicted:4d} | "
                f"{_e(g.ttft)} {_e(g.aic_ttft)} | {_e(g.tpot)} {_e(g.aic_tpot)}")

    lines += [row(g) for g in v.groups]
    lines += ["-" * len(head)] + [row(g) for g in v.overall]
    lines += ["", "on the rows both predicted (ours vs aiconfigurator):"]
    for g in v.overall:
        if g.both_ttft.rows:
            lines.append(f"  {g.model} {g.mode}: {g.both_ttft.rows} rows; TTFT {fmt_pct(g.both_ttft.median_abs)} vs "
                         f"{fmt_pct(g.both_aic_ttft.median_abs)}, TPOT {fmt_pct(g.both_tpot.median_abs)} vs "
                         f"{fmt_pct(g.both_aic_tpot.median_abs)} (median |error|)")
    refused: dict[str, int] = {}
    for r in v.rows:
        if r.refused:
            key = r.refused.split(" (")[0][:160]
            refused[key] = refused.get(key, 0) + 1
    if refused:
        lines += ["", "rows not predicted (ours), by reason:"]
        lines += [f"  {n:4d}  {k}" for k, n in sorted(refused.items(), key=lambda kv: -kv[1])]
    lines.append(f"\n(wall {fmt_num(v.wall_s, '.0f')} s, CPU {fmt_num(v.cpu_s, '.0f')} s; per-row details with --json)")
    return "\n".join(lines)



def _m(s: ErrorStats) -> str:
    if not s.rows:
        return "—"
    return f"{fmt_pct(s.median_abs, 0)} / {fmt_pct(s.p90_abs, 0)}"


def render_markdown(v: SiliconValidation) -> str:
    """The per-group table as Markdown (docs/gpu-validation.md carries the latest one)."""
    lines = ["| engine | model | mode | rows | ours | aic | TTFT ours | TTFT aic | TPOT ours | TPOT aic |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for g in (*v.groups, *v.overall):
        name = g.model if g.engine != "all" else f"**{g.model}**"
        lines.append(f"| {g.engine} | {name} | {g.mode} | {g.rows} | {g.predicted} | {g.aic_predicted} | {_m(g.ttft)} | "
                     f"{_m(g.aic_ttft)} | {_m(g.tpot)} | {_m(g.aic_tpot)} |")
    lines += ["", "On the rows both predicted:", "",
              "| rows | mode | n | TTFT ours | TTFT aic | TPOT ours | TPOT aic |", "|---|---|---:|---:|---:|---:|---:|"]
    for g in v.overall:
        lines.append(f"| {g.model} | {g.mode} | {g.both_ttft.rows} | {_m(g.both_ttft)} | {_m(g.both_aic_ttft)} | "
                     f"{_m(g.both_tpot)} | {_m(g.both_aic_tpot)} |")
    return "\n".join(lines)
