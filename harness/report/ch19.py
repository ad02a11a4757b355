"""Chapter 19 report: one section per adaptive technique, from stored runs (never measures).

Reads every run below the given path: micro runs with the precision, mixed_step, cuda_graphs,
allocator and offload suites, and sweep runs (`harness sweep`); adds the KV-dtype table of the
chapter-9 plan (harness.model.kv_dtype, a model table, computed not measured). Writes ch19.md and
ch19.html (the same text, self-contained). A section with no run says which command fills it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.outdir import writable_dir
from harness.report.renderer import ReportOptions, RunSource
from harness.units import fmt_num

RUN_KINDS = ("sweep",)
SUITES = ("precision", "mixed_step", "cuda_graphs", "allocator", "offload")
DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "ch9-hetero-pd.toml"


_f = fmt_num


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def _collect(path: Path) -> tuple[dict[str, list[dict]], dict[str, list[dict]], list[Any]]:
    from harness.store import iter_runs

    cases: dict[str, list[dict]] = {s: [] for s in SUITES}
    skips: dict[str, list[dict]] = {s: [] for s in SUITES}
    sweeps = []
    for run in iter_runs(path):
        if run.manifest.kind == "sweep":
            sweeps.append(run)
            continue
        if run.manifest.kind != "micro" or "micro_cases" not in run.tables():
            continue
        df = run.table("micro_cases")
        for rec in df[df["suite"].isin(SUITES)].to_dict("records"):
            rec["params"] = json.loads(rec["params_json"])
            rec["flags"] = json.loads(rec["flags_json"])
            rec["run_id"] = run.manifest.run_id
            cases[rec["suite"]].append(rec)
        if "micro_skips" in run.tables():
            sk = run.table("micro_skips")
            for rec in sk[sk["suite"].isin(SUITES)].to_dict("records"):
                skips[rec["suite"]].append(rec)
    return cases, skips, sweeps


def _skips(lines: list[str], skips: list[dict]) -> None:
    for s in skips:
        lines.append(f"- skipped `{s['case']}`: {s['reason']}")
    if skips:
        lines.append("")


def precision_section(cases: list[dict], skips: list[dict]) -> list[str]:
    lines = ["## 1. Precision (§19.2)", ""]
    if not cases:
        return lines + ["No precision cases: run `harness micro run --suite precision --quick`.", ""]
    ref: dict[tuple, float] = {}  # the fp32 time of the same case on the same device, else the first dtype's
    for c in sorted(cases, key=lambda c: c["dtype"] != "fp32"):
        ref.setdefault((c["device"], c["params"].get("kind"), c["case"]), c["median_s"])
    rows = []
    for c in cases:
        key = (c["device"], c["params"].get("kind"), c["case"])
        rows.append([c["device"], c["case"], c["dtype"], _f(c["median_s"], ".3g", 1e3), _f(c["flops_per_s"], ".3g", 1e-9),
                     _f(c["bytes_per_s"], ".3g", 1e-9), _f(ref[key] / c["median_s"], ".2f") + "×"])
    lines += _table(["device", "case", "dtype", "median ms", "GFLOP/s", "GB/s", "speed-up vs fp32 (or first dtype)"], rows)
    _skips(lines, skips)
    return lines


def kv_dtype_section(scenario: Path) -> list[str]:
    from harness.model.kv_dtype import kv_dtype_table
    from harness.specs.scenario import load_scenario

    lines = ["## 2. KV dtype and the chapter-9 plan (§19.6, model)", "",
             f"The plan of `{scenario.name}` re-run with only `workload.kv_dtype` changed (harness.model.kv_dtype; scales of "
             "quantised KV not counted). Model output, not a measurement.", ""]
    try:
        rows_ = kv_dtype_table(load_scenario(scenario))
    except HarnessError as exc:
        return lines + [f"Cannot plan {scenario}: {exc}", ""]
    gpus = list(rows_[0].decode_step_s)
    head = ["KV dtype", "bytes/token", "V_KV GiB", "link term req/s", "μ_PD req/s (bound; P pool)", "chunked bound req/s"]
    head += [f"decode step ms {g}" for g in gpus] + [f"max batch {g}" for g in gpus] + ["HBM / host / SSD retention s"]
    rows = []
    for r in rows_:
        ret = r.retention_s
        rows.append([r.kv_dtype, _f(r.kv_bytes_per_token, ".6g"), _f(r.state_bytes / 2**30, ".4g"), _f(r.link_requests_per_s, ".3g"),
                     f"{_f(r.pd_requests_per_s, '.3g')} ({r.pd_bound}; {r.pd_prefill})", _f(r.chunked_colocated_requests_per_s, ".3g"),
                     *[_f(r.decode_step_s[g], ".3g", 1e3) for g in gpus], *[str(r.max_decode_batch[g]) for g in gpus],
                     " / ".join(_f(ret.get(t), ".4g") for t in ("hbm", "host", "ssd"))])
    return lines + _table(head, rows)


def mixed_step_section(cases: list[dict], skips: list[dict], scenario: Path) -> list[str]:
    lines = ["## 3. Chunked prefill: the mixed step (§9.2.3, §19.11)", ""]
    if not cases:
        return lines + ["No mixed_step cases: run `harness micro run --suite mixed_step --quick`.", ""]
    by_sweep: dict[tuple, list[dict]] = {}
    for c in cases:
        p = c["params"]
        by_sweep.setdefault((c["run_id"], c["device"], c["dtype"], p["batch"], p["context_tokens"]), []).append(c)
    for (run_id, dev, dtype, B, C), cs in by_sweep.items():
        cs.sort(key=lambda c: c["params"]["chunk_tokens"])
        p0 = cs[0]["params"]
        lines.append(f"**{dev}, {dtype}, {p0['model']}, decode batch {B} at {C} keys** (run {run_id})")
        lines.append("")
        lines += _table(["chunk tokens", "step ms", "extra over decode ms", "cv"],
                        [[str(c["params"]["chunk_tokens"]), _f(c["median_s"], ".4g", 1e3),
                          _f(c["params"]["extra_s_over_decode"], ".3g", 1e3), _f(c["cv"], ".1%", 1)] for c in cs])
        h, hm = p0["fit_hidden_tokens"], p0.get("model_hidden_tokens")
        lines.append(f"Hinge fit t(c) = t0 + s·max(0, c − h): t0 = {_f(p0['fit_base_step_s'], '.4g', 1e3)} ms, "
                     f"**h = {_f(h, '.4g')} hidden prefill tokens per decode step**, s = {_f(p0['fit_per_token_s'], '.3g', 1e6)} µs per "
                     f"token beyond h (rms residual {_f(p0['fit_rms_residual_s'], '.2g', 1e3)} ms). Model for this device: "
                     f"h = {_f(hm, '.4g')}" + ("" if hm else " (the device's spec peaks are not both known)") + ".")
        if hm:
            phi = max(0.0, h / hm)
            lines.append("")
            lines += _chunked_bound_lines(scenario, phi)
        lines.append("")
    _skips(lines, skips)
    return lines


def _chunked_bound_lines(scenario: Path, phi: float) -> list[str]:
    """The chapter's chunked bound with every GPU hiding the measured fraction φ of its model h."""
    from harness.model.mixed_step import chunked_colocated_rate_measured
    from harness.model.plan import stage_rates_of, workload_of
    from harness.specs.models import get_model
    from harness.specs.scenario import load_scenario

    s = load_scenario(scenario)
    rates = stage_rates_of(s, get_model(s.workload.model), workload_of(s))
    counts = [p.count for p in s.pools]
    ideal = chunked_colocated_rate_measured(rates, counts, [r.hidden_prefill_tokens_per_decode_step for r in rates])
    meas = chunked_colocated_rate_measured(rates, counts, [phi * r.hidden_prefill_tokens_per_decode_step for r in rates])
    none = chunked_colocated_rate_measured(rates, counts, [0.0] * len(rates))
    return [f"Fed to the model: this device hides φ = {phi:.0%} of the tokens its roofline predicts. Applied to `{s.name}` "
            f"(h = {', '.join(f'{r.gpu} {r.hidden_prefill_tokens_per_decode_step:.0f}' for r in rates)} at φ = 100 %): chunked bound "
            f"{meas:.3g} req/s at φ, {ideal:.3g} ideal (the chapter's 4.17/4.50 within 1 %), {none:.3g} with nothing hidden (= unchunked colocation)."]


def cuda_graphs_section(cases: list[dict], skips: list[dict]) -> list[str]:
    lines = ["## 4. CUDA graphs and warm-up (§9.6.1, §19.10)", ""]
    graph = [c for c in cases if c["params"].get("mode") == "graph"]
    if not graph:
        return lines + ["No cuda_graphs cases: run `harness micro run --suite cuda_graphs --quick` (on a GPU for CUDA graphs).", ""]
    rows = []
    for c in graph:
        p = c["params"]
        be = p.get("break_even") or {}
        rows.append([c["device"], p["mechanism"].split(" (")[0], str(p["batch"]), _f(p["eager_step_s"], ".4g", 1e3), _f(p["graph_step_s"], ".4g", 1e3),
                     _f(p["saving_per_step_s"], ".3g", 1e6), _f(p["capture_s"], ".3g", 1e3),
                     _f(be.get("break_even_steps"), ".4g"), _f(be.get("break_even_tokens"), ".4g")])
    lines += _table(["device", "capture", "batch", "eager ms", "graph ms", "δ µs/step", "T_s ms", "break-even steps", "break-even tokens"], rows)
    lines.append("Break-even N = T_s/δ (harness.model.lifecycle.graph_capture_break_even; §9.6.1: 10 s / 0.2 ms = 50 000 steps). "
                 "δ ≤ 0 means capture never pays back on that device. On the CPU the capture is a TorchScript trace, a stand-in.")
    lines.append("")
    _skips(lines, skips)
    return lines


def allocator_section(cases: list[dict], skips: list[dict]) -> list[str]:
    lines = ["## 5. Allocator (§19.8)", ""]
    if not cases:
        return lines + ["No allocator cases: run `harness micro run --suite allocator --quick` (on a GPU for cudaMallocAsync).", ""]
    rows = []
    for c in cases:
        p = c["params"]
        rows.append([c["device"], p["allocator"], str(p["steps"]), _f(p["peak_allocated_bytes"], ".4g", 2**-20), _f(p["peak_reserved_bytes"], ".4g", 2**-20),
                     _f(p["fragmentation_at_peak"], ".1%", 1), _f(p["mean_fragmentation"], ".1%", 1), _f(p["final_reserved_bytes"], ".4g", 2**-20),
                     _f(c["median_s"], ".3g", 1e3)])
    lines += _table(["device", "allocator", "steps", "peak allocated MiB", "peak reserved MiB", "fragmentation at peak", "mean fragmentation",
                     "reserved at end MiB", "step ms"], rows)
    lines.append("Fragmentation = 1 − allocated/reserved. On the CPU the allocator is glibc malloc and 'reserved' the resident set "
                 "above baseline (a stand-in for the GPU comparison).")
    lines.append("")
    _skips(lines, skips)
    return lines


def offload_section(cases: list[dict], skips: list[dict]) -> list[str]:
    lines = ["## 6. KV offload with layer-wise prefetch (§9.5.2, §19.5)", ""]
    if not cases:
        return lines + ["No offload cases: run `harness micro run --suite offload --quick`.", ""]
    rows = []
    for c in cases:
        p = c["params"]
        rows.append([c["device"], p["schedule"], str(p["layers"]), _f(p["layer_kv_bytes"], ".4g", 2**-20), _f(c["median_s"], ".4g", 1e3),
                     _f(p.get("predicted_s"), ".4g", 1e3), _f(p.get("measured_over_predicted"), ".2f"), p.get("predicted_bound") or "—"])
    lines += _table(["device", "schedule", "layers", "KV/layer MiB", "measured ms", "model ms", "measured/model", "model bound"], rows)
    lines.append("The model (harness.model.kv_prefetch) takes the measured whole read and whole compute and predicts each schedule; "
                 "a ratio above 1 is overlap the device did not achieve.")
    lines.append("")
    _skips(lines, skips)
    return lines


def sweep_section(sweeps: list[Any]) -> list[str]:
    lines = ["## 7. SLO-driven tuning: sweeps (§19.7, §19.11)", ""]
    if not sweeps:
        return lines + ["No sweep runs: run `harness sweep --target ... --grid ...` (see docs/ch19.md).", ""]
    for run in sweeps:
        sj = run.json("sweep.json")
        d = sj["reward"]
        lines.append(f"**{run.manifest.run_id}**: target `{run.manifest.extra.get('target', {}).get('text')}`; "
                     f"reward = {d['reward']} with latency {d['latency']}, SLA {d['sla_s']} s, λ {d['lambda']}; times in {d['time']}.")
        lines.append("")
        rows = []
        for p in sj["points"]:
            if p["status"] != "ok":
                rows.append([p["label"], p["status"] + ": " + p["reason"][:80], *["—"] * 6])
                continue
            mark = ("best " if p["best"] else "") + ("pareto" if p["pareto"] else "") + ("" if p["valid"] else " invalid")
            rows.append([p["label"], _f(p["output_tokens_per_s"], ".4g"), _f(p["ttft_p95_s"], ".4g", 1e3), _f(p["itl_p95_s"], ".4g", 1e3),
                         _f(p["e2e_p95_s"], ".4g", 1e3), _f(p["goodput_per_s"], ".3g"), _f(p["reward"], ".4g"), mark])
        lines += _table(["setting", "output tok/s", "TTFT p95 ms", "ITL p95 ms", "E2E p95 ms", "goodput req/s", "reward", ""], rows)
        b = sj["best"]
        lines.append(f"Best: `{b['label']}`. Pareto front (throughput vs p95 {d['latency']}): "
                     + ", ".join(f"`{p['label']}`" for p in sj["pareto"]) + ".")
        for n in sj.get("notes", []):
            lines.append(f"- note: {n}")
        lines.append("")
    return lines


def render(path: RunSource, out_dir: str | Path, options: ReportOptions | None = None) -> list[Path]:
    """ch19.md and ch19.html for the runs below `path`; options.scenario is the scenario re-planned (default ch9-hetero-pd)."""
    scenario = options.scenario if options else None
    p = Path(path)
    if not p.exists():
        raise HarnessError(f"{p} does not exist; give a run directory or results/<machine>/.")
    scen = Path(scenario) if scenario else DEFAULT_SCENARIO
    cases, skips, sweeps = _collect(p)
    lines = ["# Chapter 19: adaptive techniques, measured", "",
             f"Runs below `{p}`. Each section names its source: a microbenchmark suite, a sweep, or the model.", ""]
    lines += precision_section(cases["precision"], skips["precision"])
    lines += kv_dtype_section(scen)
    lines += mixed_step_section(cases["mixed_step"], skips["mixed_step"], scen)
    lines += cuda_graphs_section(cases["cuda_graphs"], skips["cuda_graphs"])
    lines += allocator_section(cases["allocator"], skips["allocator"])
    lines += offload_section(cases["offload"], skips["offload"])
    lines += sweep_section(sweeps)
    out = writable_dir(out_dir, "--to", "report directory")
    md = out / "ch19.md"
    md.write_text("\n".join(lines))
    page = out / "ch19.html"
    page.write_text("<!doctype html><meta charset='utf-8'><title>Chapter 19 report</title>"
                    "<style>body{font-family:sans-serif;max-width:70em;margin:auto}pre{white-space:pre-wrap}</style>"
                    f"<pre>{html.escape(md.read_text())}</pre>")
    return [md, page]
