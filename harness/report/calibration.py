"""The calibration report: what one machine's micro runs measured, and what that changes in the model.

Renders from stored results only (never measures): fits the constants (harness.calibration.fit)
or reads a calibration file, runs the model (harness.model.plan) at datasheet defaults and with
the calibrated constants, and draws the roofline, the efficiency curves, the α–β fits, the PD
allocation heatmap (Fig. 9-10), the startup drain (Fig. 9-42), predicted vs measured stage rates
and, when load runs exist, predicted vs measured throughput and TTFT.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.calibration.record import CalibrationRecord
from harness.errors import HarnessError
from harness.model.plan_records import Plan
from harness.report import figures as F
from harness.report.conclusions import evaluate
from harness.report.page import Figure, Page, Table
from harness.report.renderer import ReportOptions
from harness.units import fmt_num, fmt_pct
from harness.served import Percentiles

RUN_KINDS = ("micro", "calibration")
DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "ch9-hetero-pd.toml"


_pct = fmt_pct


def _si(x: float | None, unit: str, scale: float, nd: int = 3) -> str:
    return fmt_num(x, f".{nd}g", scale, f" {unit}", missing="n/a")


def _est(e, unit: str, scale: float) -> str:
    return f"{e.value * scale:.3g} [{e.low * scale:.3g}, {e.high * scale:.3g}] {unit}"


def _proxy_for(rec: CalibrationRecord, gpus: list[str], mode: str) -> tuple[dict[str, str], str]:
    """Which measured device stands for each scenario GPU that was not measured itself."""
    if mode == "none":
        return {}, "no proxy: GPUs not measured keep the datasheet defaults"
    if mode != "auto":
        pairs = dict(p.split("=", 1) for p in mode.split(",") if "=" in p)
        bad = [d for d in pairs.values() if d not in rec.devices]
        if bad or not pairs:
            raise HarnessError(f"--proxy {mode!r}: give GPU=DEVICE pairs with a measured device; measured: {', '.join(rec.devices) or 'none'}.")
        return pairs, "proxy as given: " + ", ".join(f"{g} ← {d}" for g, d in pairs.items())
    from harness.specs.device_names import device_family

    missing = [g for g in gpus if g not in rec.devices and g not in rec.proxy]
    cands = [d for d in rec.devices if any(c.device == d for c in rec.curves)]
    if not missing or not cands:
        return {}, "no proxy needed" if not missing else "nothing measured that could stand in"
    # only within one device family (hardware generation): a CPU's or another generation's efficiency is not this GPU's
    pairs, refused = {}, []
    for g in missing:
        fam = device_family(g)
        same = [d for d in cands if fam is not None and device_family(d) == fam]
        if same:
            pairs[g] = max(same, key=lambda d: sum(len(c.points) for c in rec.curves if c.device == d))
        else:
            refused.append(g)
    notes = []
    if pairs:
        notes.append("proxy (auto, same device family only): " + ", ".join(
            f"the efficiency curves measured on {d} stand for {g} ({device_family(g)})" for g, d in pairs.items()))
    if refused:
        fams = ", ".join(f"{d} ({device_family(d) or 'unknown'})" for d in cands)
        gone = ", ".join(f"{g} ({device_family(g) or 'unknown'})" for g in refused)
        notes.append(f"not applied across device families: {gone} "
                     f"keep the datasheet defaults, since only {fams} was measured; pass --proxy {refused[0]}={cands[0]} to "
                     "apply them anyway, as the chapter applied RTX PRO 6000 curves to A100 and H20 (§9.2.3)")
    notes.append("links keep their datasheet values unless measured")
    return pairs, "; ".join(notes)


def render(path: str | Path, out_dir: str | Path, options: ReportOptions | None = None) -> list[Path]:
    """Render the calibration report of the runs below `path` into out_dir (index.html, summary.md, figures/)."""
    from harness.calibration.apply import MeasuredConstants
    from harness.calibration.file import load_calibration
    from harness.calibration.fit import fit_calibration
    from harness.calibration.runs import load_machine_runs
    from harness.model.plan import plan
    from harness.specs.scenario import load_scenario

    o = options or ReportOptions()
    mr = None
    if o.calibration:
        rec = load_calibration(o.calibration)
        cal_source = o.calibration
        try:
            mr = load_machine_runs(path)
        except HarnessError:
            mr = None
    else:
        mr = load_machine_runs(path)
        rec = fit_calibration(mr, seed=o.seed, n_bootstrap=o.n_bootstrap)
        cal_source = f"fitted from {path}"
    scenario = load_scenario(o.scenario or DEFAULT_SCENARIO)
    gpus = [p.gpu for p in scenario.pools]
    proxy, proxy_note = _proxy_for(rec, gpus, o.proxy)
    constants = MeasuredConstants(rec, cal_source).with_proxy(proxy)
    p_default = plan(scenario, include_grid=False)
    p_cal = plan(scenario, calibration=constants, include_grid=False)

    synthetic = _synthetic_runs(path)
    page = Page(
        f"Calibration report: {rec.machine}" + (" (SYNTHETIC runs)" if synthetic else ""),
        (f"SYNTHETIC: {len(synthetic)} run(s) were generated from known constants, not measured. " if synthetic else "")
        + f"{len(rec.runs)} run(s); constants {cal_source}; scenario {scenario.name} ({scenario.source}). "
        "Rendered from stored results only; intervals are 95% bootstrap intervals over raw samples "
        f"({rec.n_bootstrap} resamples, seed {rec.seed}).",
    )
    _inputs(page, rec, mr)
    _constants(page, rec, p_cal, proxy_note)
    _what_changed(page, p_default, p_cal, scenario, proxy_note)
    if mr is not None:
        _rooflines(page, mr)
    _efficiency(page, rec, scenario)
    _links(page, rec)
    _heatmaps(page, p_default, p_cal, scenario)
    _drain(page, p_default, p_cal, scenario)
    _stages(page, rec, scenario)
    _load(page, path, o, p_default, p_cal, scenario)
    return page.write(out_dir)


def _synthetic_runs(path: Any) -> list[str]:
    from harness.store import iter_runs

    try:
        return [r.manifest.run_id for r in iter_runs(path) if r.manifest.kind != "load" and _simulated(r)]
    except HarnessError:
        return []


# ---- sections ----


def _inputs(page: Page, rec: CalibrationRecord, mr: Any) -> None:
    s = page.section("Inputs")
    s.items.append(Table(["fact", "value"], [[k, str(v)] for k, v in rec.key_facts.items()],
                         "Key facts shared by every run (runs that differ are refused)."))
    rows = [[r.run_id, r.kind, r.status, ", ".join(r.suites)] for r in rec.runs[:50]]
    more = f" ({len(rec.runs) - 50} more not listed)" if len(rec.runs) > 50 else ""
    s.items.append(Table(["run", "kind", "status", "suites"], rows, f"Runs the constants came from{more}."))
    for w in rec.warnings:
        s.items.append(f"Warning: {w}")


def _constants(page: Page, rec: CalibrationRecord, p_cal: Plan, proxy_note: str) -> None:
    s = page.section("Fitted constants")
    rows = []
    for c in rec.curves:
        for p in c.points:
            rows.append([f"{c.quantity} ({c.device}, {c.dtype})", f"{c.x_name} = {p.x:g}",
                         f"{p.measured.value:.1%} [{p.measured.low:.1%}, {p.measured.high:.1%}]", f"{p.fitted:.1%}",
                         ", ".join(p.measured.run_ids[:3]) + (" …" if len(p.measured.run_ids) > 3 else "")])
    if rows:
        s.items.append(Table(["curve", "at", "measured [95%]", "used (fit)", "runs"], rows,
                             "Efficiency = useful work / (median time × spec peak)."))
    single = []
    for lf in rec.links:
        single.append([f"link {lf.key}: startup α", _est(lf.alpha_s, "µs", 1e6), lf.alpha_s.method])
        single.append([f"link {lf.key}: bandwidth β", _est(lf.bandwidth_bytes_per_s, "GB/s", 1e-9), lf.bandwidth_bytes_per_s.method])
    if rec.cpu_expert_flops_per_s:
        single.append(["C_C, CPU expert throughput", _est(rec.cpu_expert_flops_per_s, "TFLOP/s", 1e-12), rec.cpu_expert_flops_per_s.method])
    if rec.host_memory_bandwidth_bytes_per_s:
        e = rec.host_memory_bandwidth_bytes_per_s
        single.append(["B_D, host memory bandwidth", _est(e, "GB/s", 1e-9), e.method])
    for op, e in rec.storage.items():
        single.append([f"storage {op} bandwidth", _est(e, "GB/s", 1e-9), e.method])
    for st in rec.stages:
        name = "r_P" if st.phase == "prefill" else "r_D"
        single.append([f"measured {name} ({st.device}, {st.model})", _est(st.rate, st.rate.unit, 1.0), st.rate.method])
    if single:
        s.items.append(Table(["constant", "value [95%]", "method"], single))
    s.items.append(proxy_note)
    consts = p_cal.calibration.constants if p_cal.calibration else ()
    rows = [[c.constant, f"{c.value:.4g}" if c.value is not None else "n/a",
             "" if c.low is None else f"[{c.low:.4g}, {c.high:.4g}]", c.origin] for c in consts]
    s.items.append(Table(["constant the plan uses", "value", "95% interval", "origin"], rows,
                         "Every constant of the plan, and whether it is a measurement or a datasheet default."))


def _what_changed(page: Page, p_default: Plan, p_cal: Plan, scenario: Any, proxy_note: str = "") -> None:
    s = page.section("What changed: the chapter's conclusions with calibrated constants")
    origins = {c.origin for c in (p_cal.calibration.constants if p_cal.calibration is not None else ())}
    if origins <= {"datasheet default"}:
        s.items.append("No measured constant applies to this scenario's GPUs, so the calibrated column repeats the "
                       f"datasheet column ({proxy_note}).")
    rows = []
    for c in evaluate(p_default, p_cal):
        yn = lambda h: "n/a" if h is None else ("holds" if h else "FAILS")  # noqa: E731
        rows.append([c.claim, c.source, c.chapter, f"{c.datasheet} ({yn(c.holds_datasheet)})",
                     f"{c.calibrated} ({yn(c.holds_calibrated)})", "CHANGED" if c.changed else "same"])
    s.items.append(Table(["conclusion", "source", "chapter", "datasheet defaults", "calibrated [95%]", "verdict"], rows,
                         f"Scenario {scenario.name}. Intervals propagate the constants' 95% intervals (pessimistic and "
                         "optimistic ends)."))


def _rooflines(page: Page, mr: Any) -> None:
    s = page.section("Roofline per device, with measured points")
    df = mr.cases
    for dev, g in df.groupby("device_key", sort=True):
        g = g[(g["useful_flops"].astype(float) > 0) & (g["useful_bytes"].astype(float) > 0) & g["suite"].isin(["gemm", "decode", "stage", "moe"])]
        if g.empty:
            continue
        # one point per case: the median over the runs that measured it
        agg = g.groupby("case_id").agg(flops=("useful_flops", "first"), nbytes=("useful_bytes", "first"),
                                       median_s=("median_s", "median"), suite=("suite", "first"))
        pts = [(float(f) / float(b), float(f) / float(t), str(su))
               for f, b, t, su in zip(agg["flops"], agg["nbytes"], agg["median_s"], agg["suite"])]
        pf = g["peak_flops_per_s"].astype(float).dropna()
        pb = g["peak_bytes_per_s"].astype(float).dropna()
        png = F.roofline(dev, float(pf.iloc[0]) if len(pf) else None, float(pb.iloc[0]) if len(pb) else None, pts)
        s.items.append(Figure(f"roofline-{_slug(dev)}", f"Roofline of {dev}", png,
                              f"{len(pts)} measured cases; roof from the spec peaks the cases recorded."))


def _efficiency(page: Page, rec: CalibrationRecord, scenario: Any) -> None:
    s = page.section("Efficiency vs batch and vs tokens per GPU")
    dec = [c for c in rec.curves if c.quantity == "decode_bandwidth_efficiency"]
    pre = [c for c in rec.curves if c.quantity == "prefill_compute_efficiency"]
    if dec:
        s.items.append(Figure("efficiency-vs-batch", "Decode bandwidth efficiency vs batch", F.efficiency_curves(
            dec, "decode batch", "Decode MBU vs batch", [(1, 0.33), (32, 0.49), (64, 0.65)],
            "chapter (RTX PRO 6000, §9.2.3)", scenario.workload.decode_batch),
            "Monotone fit (pool-adjacent-violators), linear in the batch between points; bars are 95% intervals."))
    if pre:
        s.items.append(Figure("efficiency-vs-tokens", "Prefill compute efficiency vs tokens per GPU", F.efficiency_curves(
            pre, "tokens per GPU", "Prefill MFU vs tokens", [(512, 0.58), (8192, 0.62)], "chapter range 58–62% (§9.2.3)",
            scenario.workload.input_tokens - scenario.workload.cached_prefix_tokens),
            "All projections of one token count together; the scenario's tokens per GPU marked."))
    if not dec and not pre:
        s.items.append("No decode or gemm cases were measured; efficiencies stay at the datasheet default of 50%.")


def _links(page: Page, rec: CalibrationRecord) -> None:
    s = page.section("Links: α–β fits with residuals")
    if not rec.links:
        s.items.append("No transfer cases were measured; links keep their datasheet values.")
    for lf in rec.links:
        s.items.append(Figure(f"link-{_slug(lf.key)}", f"α–β fit of {lf.key}", F.link_fit(lf),
                              f"T(S) = α + S/β by weighted least squares ({lf.weighting}); residual = (measured − fit)/fit."
                              + (f" Bytes: {lf.byte_convention}." if lf.byte_convention else "")))


def _grid(p: Plan) -> tuple[np.ndarray, list[tuple[int, int]], list[str]] | None:
    """μ over the (GPU type 0 in P) × (GPU type 1 in P) grid, and the optimal cells, for a two-type cluster."""
    if p.pd is None:
        return None
    gpus = list(p.pd.search.gpus)
    if len(gpus) != 2:
        return None
    grid = p.pd.search.arrays().requests_per_s
    opt = [(a.prefill[gpus[0]], a.prefill[gpus[1]]) for a in p.pd.optimal]
    return grid, opt, gpus


def _heatmaps(page: Page, p_default: Plan, p_cal: Plan, scenario: Any) -> None:
    s = page.section("PD allocation (Fig. 9-10) under datasheet and calibrated constants")
    a, b = _grid(p_default), _grid(p_cal)
    if a is None or b is None:
        s.items.append("The scenario is not a two-GPU-type PD cluster; no heatmap.")
        return
    gpus = a[2]
    png = F.pd_heatmaps([("datasheet defaults (50%)", a[0], a[1]), ("calibrated", b[0], b[1])],
                        f"{gpus[0]} in P", f"{gpus[1]} in P")
    s.items.append(Figure("pd-heatmap", "Sustainable req/s for every P/D split", png,
                          "min(μ_P, μ_D, link) per split, no queueing; the rest of each type goes to D; optimal splits framed."))


def _drain(page: Page, p_default: Plan, p_cal: Plan, scenario: Any) -> None:
    s = page.section("Startup drain (Fig. 9-42)")
    st = scenario.startup
    lam = scenario.workload.arrival_rate_per_s
    if not st.startup_s or not lam:
        s.items.append("The scenario has no startup backlog.")
        return
    schemes = []
    for label, p, style in (("datasheet", p_default, "--"), ("calibrated", p_cal, "-")):
        for name in ("pd", "chunked_colocated", "replicas"):
            if name in p.drain:
                schemes.append((f"{name} ({label})", p.drain[name].service_rate_per_s, style))
    s.items.append(Figure("startup-drain", "Queue after startup", F.drain_curves(lam, st.startup_s, st.deadline_s, schemes),
                          "Fluid model of §9.6.1: the backlog λ·T_s drains at μ − λ once the service is ready."))
    rows = []
    for name, d0 in p_default.drain.items():
        d1 = p_cal.drain.get(name)
        if d1 is None:
            continue
        f = lambda x: "never" if x is None else f"{x:.1f} s"  # noqa: E731
        rows.append([name, f"{d0.service_rate_per_s:.2f}", f(d0.clear_at_s), f"{d1.service_rate_per_s:.2f}", f(d1.clear_at_s)])
    s.items.append(Table(["scheme", "μ datasheet", "clears (datasheet)", "μ calibrated", "clears (calibrated)"], rows))


def _stage_prediction(st, rec: CalibrationRecord, calibrated: bool) -> float | None:
    """The model's rate for a stage case: units / max(F/(η_c·peak FLOP/s), B/(η_b·peak bytes/s)) with the
    case's own FLOP and byte counts (§9.2.3), η at the datasheet default 50% or read off this device's curves."""
    from harness.calibration.apply import MeasuredConstants

    if not (st.useful_flops or st.useful_bytes) or not (st.peak_flops_per_s or st.peak_bytes_per_s):
        return None
    eta_c = eta_b = 0.5
    if calibrated:
        e = MeasuredConstants(rec, "").efficiency(st.device, st.batch or 1, st.tokens or 1, st.dtype or "bf16")
        if e is None:
            return None
        eta_c, eta_b = e.compute, e.bandwidth
    terms = []
    if st.peak_flops_per_s and st.useful_flops:
        terms.append(st.useful_flops / (eta_c * st.peak_flops_per_s))
    if st.peak_bytes_per_s and st.useful_bytes:
        terms.append(st.useful_bytes / (eta_b * st.peak_bytes_per_s))
    if not terms:
        return None
    units = st.tokens if st.phase == "prefill" else st.batch
    return float(units) / max(terms) if units else None


def _stages(page: Page, rec: CalibrationRecord, scenario: Any) -> None:
    s = page.section("Predicted vs measured stage rates")
    if not rec.stages:
        s.items.append("No stage cases were measured (run `harness micro run --suite stage`).")
        return
    rows, table = [], []
    for st in rec.stages:
        label = f"{'r_P' if st.phase == 'prefill' else 'r_D'} {st.device}"
        d = _stage_prediction(st, rec, False)
        c = _stage_prediction(st, rec, True)
        rows.append((label, st.rate.value, d, c, st.rate.low, st.rate.high))
        ratio = lambda x: "n/a" if x is None else f"{st.rate.value / x:.2f}"  # noqa: E731
        table.append([label, st.model, _est(st.rate, st.rate.unit, 1.0), _si(d, "", 1.0), ratio(d), _si(c, "", 1.0), ratio(c)])
    s.items.append(Figure("stage-rates", "Stage rates: measured vs model", F.predicted_vs_measured(rows, "Stage rates", "rate (per s)"),
                          "Model: the case's own FLOP and byte counts against the device's spec peaks, at 50% or at the "
                          "efficiency measured on this device at the case's tokens or batch."))
    s.items.append(Table(["rate", "model", "measured [95%]", "model @50%", "measured/model", "model calibrated",
                          "measured/model"], table))


def _load(page: Page, path: Any, o: ReportOptions, p_default: Plan, p_cal: Plan, scenario: Any) -> None:
    from harness.store import iter_runs

    s = page.section("End-to-end: predicted vs measured throughput and TTFT")
    roots = [Path(o.load)] if o.load else [Path(path)]
    found = [r for root in roots if root.exists() for r in iter_runs(root, kind="load")]
    runs = [r for r in found if not _simulated(r)]
    if len(runs) < len(found):
        s.items.append(f"{len(found) - len(runs)} load run(s) against a simulated target left out: its timings come from "
                       "the model itself, so comparing them with the model proves nothing.")
    if not runs:
        s.items.append("No end-to-end load runs (kind \"load\") were found; run `make bench-pd` and pass --load results/<machine>/.")
        return
    rows, fig_rows = [], []
    for r in runs:
        summ = _load_summary(r)
        if summ is None:
            continue
        thr, ttft, lam = summ
        pred = {}
        for label, p in (("datasheet", p_default), ("calibrated", p_cal)):
            mu = (p.pd.best.requests_per_s if p.pd else None) or p.colocated.requests_per_s
            arr = lam if lam else p.workload.arrival_rate_per_s
            t_kv = p.kv.transfer_s or 0.0
            d_p = min(v.prefill_s_per_request for v in p.stage_rates.values())
            pred[label] = (min(arr, mu), d_p + t_kv)
        rows.append([r.manifest.run_id, f"{thr:.2f}", f"{pred['datasheet'][0]:.2f}", f"{pred['calibrated'][0]:.2f}",
                     _si(ttft, "ms", 1e3), _si(pred["datasheet"][1], "ms", 1e3), _si(pred["calibrated"][1], "ms", 1e3)])
        fig_rows.append((f"{r.manifest.run_id[:18]} req/s", thr, pred["datasheet"][0], pred["calibrated"][0], thr, thr))
    if not rows:
        s.items.append("Load runs were found but none had a requests table or summary to compare.")
        return
    s.items.append(Table(["load run", "measured req/s", "model req/s (datasheet)", "model req/s (calibrated)", "TTFT p50",
                          "model TTFT (datasheet)", "model TTFT (calibrated)"], rows,
                         f"Model throughput min(λ, μ) of scenario {scenario.name}; model TTFT = fastest prefill + KV hand-off, "
                         "no queueing (a lower bound)."))
    s.items.append(Figure("load-throughput", "Throughput: measured vs model", F.predicted_vs_measured(fig_rows, "Throughput", "req/s")))


def _simulated(run: Any) -> bool:
    """A run whose target or measurements were simulated (the embedded target, a synthetic micro run)."""
    m = run.manifest
    engine = m.engine if isinstance(m.engine, dict) else {}
    extra = m.extra if isinstance(m.extra, dict) else {}
    return bool(engine.get("simulated") or extra.get("simulated") or extra.get("synthetic"))


def _load_summary(run: Any) -> tuple[float, float | None, float | None] | None:
    """(completed req/s, TTFT p50 s, intended req/s) of a load run, from its summary.json or requests table."""
    try:  # the few figures used, from any summary.json that has them (hand-made fixtures hold only these)
        d = run.json("summary.json")
        load = d.get("load", d)
        return (float(load["request_throughput_per_s"]), Percentiles.from_dict(load.get("ttft_s")).p50,
                load.get("intended_rate_per_s"))
    except (HarnessError, OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        df = run.table("requests")
    except HarnessError:
        return None
    ok = df[df["error_class"] == "ok"] if "error_class" in df.columns else df
    if ok.empty or "ttft_s" not in ok.columns:
        return None
    span = (ok["last_byte_ns"].max() - ok["sent_ns"].min()) / 1e9 if {"last_byte_ns", "sent_ns"} <= set(ok.columns) else math.nan
    thr = len(ok) / span if span and math.isfinite(span) and span > 0 else math.nan
    return thr, float(ok["ttft_s"].median()), None


def _slug(s: str) -> str:
    from harness.records import slug

    return slug(s)
