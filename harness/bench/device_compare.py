"""The device loop's twins against its measured served points, offline: per point, metric and twin, the error and the
engine's own repeat-to-repeat spread.

Reads a device-loop work folder (microbench/device_loop.sh's WORK, or its tarball unpacked): predictions.json (every
twin's prediction of every point, made before the served step) and served.jsonl (each load run as measured).
Metrics and targets (issue 47, judged on dedicated hardware): capacity of the burst (requests/s by
harness.target.saturation's estimator) within 5 %, TTFT p50 and TPOT p50 of every rate point within 10 %. A point
measured twice is judged on the median of its repeats (ServedMeasurement.median_of); its spread is (max − min) /
median over the repeats. Predictions and measurements are the shared records of harness.served, compared by its one
function (compare_served, the error a signed fraction (predicted − measured) / measured).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from harness.bench.device_work import RUN_KIND, TWIN_LABELS, load_preset, served_point
from harness.errors import HarnessError
from harness.loop.gpu import StoredPoint, compare_stored
from harness.loop.measure import read_load_run
from harness.loop.predict import served_prediction
from harness.records import new_manifest
from harness.served import ServedMeasurement, ServedPoint, ServedPrediction, compare_served, fmt_error_pct
from harness.store import RunWriter
from harness.target.des import ServedFigures
from harness.target.twin import load_twin
from workloads.artifact import load_artifact

TARGETS = {"capacity_requests_per_s": 0.05, "ttft_p50_s": 0.10, "tpot_p50_s": 0.10}
TWIN_ORDER = ("b", "a", "b_proxy")


def read_served(work: Path) -> list[dict[str, Any]]:
    p = work / "served.jsonl"
    if not p.is_file():
        raise HarnessError(f"{p} is missing: the served step measured nothing (see checks.json and the log).")
    rows = []
    for i, ln in enumerate(p.read_text().splitlines(), 1):
        if ln.strip():
            try:
                rows.append(json.loads(ln))
            except json.JSONDecodeError as exc:
                raise HarnessError(f"{p} line {i} is not JSON ({exc}); the served step was cut while writing it.") from None
    return rows


def spread(values: list[float]) -> float | None:
    """(max − min) / median of a point's repeats; None with fewer than two."""
    if len(values) < 2:
        return None
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else None


def prediction_record(point: ServedPoint, fig: dict[str, Any], source: str) -> ServedPrediction:
    """A twin's figures of predictions.json as the shared record: a burst's capacity, or a rate point's figures."""
    if "capacity_rps" in fig:
        return ServedPrediction(point, source, capacity_requests_per_s=fig["capacity_rps"])
    return served_prediction(point, ServedFigures(**fig), None, source)


def compare_work(work: str | Path) -> dict[str, Any]:
    """Every (point, metric, twin) row with the prediction, the measured median, the error and the repeats' spread
    (harness.served.compare_served on the shared records); and per twin the verdict against the targets."""
    w = Path(work)
    pth = w / "predictions.json"
    if not pth.is_file():
        raise HarnessError(f"{pth} is missing: the twins step did not run (see checks.json); nothing to compare.")
    pred = json.loads(pth.read_text())
    by_point: dict[int, list[ServedMeasurement]] = {}
    requests_ok: dict[int, int] = {}
    for r in read_served(w):
        m = ServedMeasurement.from_dict(r["measurement"], f"{w}/served.jsonl")
        by_point.setdefault(int(r["point"]), []).append(m)
        requests_ok[int(r["point"])] = requests_ok.get(int(r["point"]), 0) + m.requests_ok
    rows: list[dict[str, Any]] = []
    for pt in pred["points"]:
        point = served_point(pt)
        reps = by_point.get(pt["point"], [])
        meas = ServedMeasurement.median_of(reps) if reps else ServedMeasurement(point, "not measured")
        metrics = ["capacity_requests_per_s"] if point.burst else ["ttft_p50_s", "tpot_p50_s"]
        for twin, fig in pt["predicted"].items():
            c = compare_served(prediction_record(point, fig, TWIN_LABELS.get(twin, twin)), meas,
                               targets={m: TARGETS[m] for m in metrics}, metrics=metrics)
            for mc in c.rows:
                vals = [v for v in (mc.repeat_values or ((mc.measured,) if reps else ())) if v is not None]
                rows.append({"point": pt["point"], "mix": pt["mix"], "kind": pt["kind"], "fraction": pt["fraction"],
                             "rate_per_s": pt["rate_per_s"], "metric": mc.metric, "twin": twin, "predicted": mc.predicted,
                             "measured": mc.measured, "repeats": len(vals), "measured_values": vals, "error": mc.error,
                             "repeat_spread": spread(vals), "target": mc.target, "within_target": mc.within,
                             "requests_ok": requests_ok.get(pt["point"], 0)})
    return {"schema_version": 1, "planned_on": pred.get("planned_on"), "twins": pred.get("twins", {}),
            "twins_missing": pred.get("twins_missing", {}), "rows": rows, "verdict": verdict(rows),
            "unmeasured_points": [pt["point"] for pt in pred["points"] if pt["point"] not in by_point]}


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per twin: figures judged, within target, median |error|; and the engine's median repeat spread beside it."""
    out: dict[str, Any] = {}
    for twin in sorted({r["twin"] for r in rows}, key=lambda t: TWIN_ORDER.index(t) if t in TWIN_ORDER else 9):
        judged = [r for r in rows if r["twin"] == twin and r["error"] is not None]
        errs = [abs(r["error"]) for r in judged]
        out[twin] = {"judged": len(judged), "within_target": sum(bool(r["within_target"]) for r in judged),
                     "median_abs_error": statistics.median(errs) if errs else None}
    per_figure = {(r["point"], r["metric"]): r["repeat_spread"] for r in rows if r["repeat_spread"] is not None}
    spreads = list(per_figure.values())
    out["engine_repeat_spread_median"] = statistics.median(spreads) if spreads else None
    return out


def markdown(cmp: dict[str, Any]) -> str:
    """The comparison as a Markdown table (docs/gpu-loop.md's layout) with the verdict lines under it."""
    lines = ["| point | mix | load | metric | twin | predicted | measured (repeats) | error | repeat spread |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in cmp["rows"]:
        load = "burst" if r["kind"] == "burst" else f"{r['fraction']:.0%} ({r['rate_per_s']:.3g} req/s)"
        unit = (lambda v: "—" if v is None else f"{v:.3g} req/s") if r["metric"] == "capacity_requests_per_s" else \
            (lambda v: "—" if v is None else f"{v * 1e3:.1f} ms")
        sp = "—" if r["repeat_spread"] is None else f"{r['repeat_spread']:.1%}"
        lines.append(f"| {r['point']} | {r['mix']} | {load} | {r['metric']} | {r['twin']} | {unit(r['predicted'])} | "
                     f"{unit(r['measured'])} ({r['repeats']}) | {fmt_error_pct(r['error'])} | {sp} |")
    v = cmp["verdict"]
    lines.append("")
    for twin in [k for k in v if k != "engine_repeat_spread_median"]:
        t = v[twin]
        med = "—" if t["median_abs_error"] is None else f"{t['median_abs_error']:.1%}"
        label = cmp["twins"].get(twin, {}).get("label", twin)
        lines.append(f"- twin {label}: {t['within_target']} of {t['judged']} figures within target, median |error| {med}")
    sp = v.get("engine_repeat_spread_median")
    lines.append(f"- the engine against itself: median repeat-to-repeat spread {'—' if sp is None else f'{sp:.1%}'}")
    for k, why in cmp.get("twins_missing", {}).items():
        lines.append(f"- twin {k} not built: {why}")
    if cmp.get("unmeasured_points"):
        lines.append(f"- points not measured (deadline or failure): {cmp['unmeasured_points']}")
    return "\n".join(lines) + "\n"


def _moved(path: str, work: Path, recorded_work: str | None) -> str:
    """A path the call recorded on the device, under the folder the tarball was unpacked to (offline)."""
    if not recorded_work or not path.startswith(recorded_work.rstrip("/") + "/") or Path(path).exists():
        return path
    return str(work / path[len(recorded_work.rstrip("/")) + 1:])


def loop_reports(work: str | Path) -> dict[str, Any]:
    """Each twin's LoopReport over the stored points (harness.loop.gpu.compare_stored: the loop's own predict, compare
    and verdicts, the absolute one and the repeatability one, on the load runs read back by read_load_run)."""
    w = Path(work)
    p = load_preset(w)
    rec = json.loads((w / "plan.json").read_text()).get("work")
    pred = json.loads((w / "predictions.json").read_text())
    served = read_served(w)
    stored = []
    for pt in pred["points"]:
        point = served_point(pt)
        runs = tuple(read_load_run(_moved(r["load"]["run_dir"], w, rec), point, 0.0 if point.burst else p.point_s,
                                   repeat=int(r["repeat"]), threads=p.threads)
                     for r in served if int(r["point"]) == pt["point"])
        if runs:
            stored.append(StoredPoint(point, load_artifact(_moved(pt["artifact"], w, rec)), runs,
                                      math.nan if pt["fraction"] is None else float(pt["fraction"])))
    out: dict[str, Any] = {}
    for f in sorted((w / "twins").glob("*.json")):
        # the twin's files (twin (a)'s step-time file and model), where the tarball or the caller put them
        d = _relocated(json.loads(f.read_text()), w, rec)
        tmp = w / "twins" / f".{f.name}.local"
        tmp.write_text(json.dumps(d))
        try:
            out[f.stem] = compare_stored(load_twin(tmp), stored, duration_s=p.point_s, kind="loop-gpu",
                                         config=f"device loop ({p.device})")
        except HarnessError as exc:
            out[f.stem] = HarnessError(f"twin {f.stem}: {exc}" + (
                f" (the model is not carried back: write it again, seeded, with `python -m harness.engines.random_gguf "
                f"{w / 'model.gguf'} --shape {p.shape} --type {p.qtype}`)" if ".gguf" in str(exc) else ""))
        finally:
            tmp.unlink()
    return out


def _relocated(d: Any, work: Path, recorded_work: str | None) -> Any:
    if isinstance(d, dict):
        return {k: _relocated(v, work, recorded_work) for k, v in d.items()}
    if isinstance(d, list):
        return [_relocated(v, work, recorded_work) for v in d]
    return _moved(d, work, recorded_work) if isinstance(d, str) else d


def store_run(work: str | Path, cmp: dict[str, Any], reports: dict[str, Any] | None = None) -> Path:
    """One run of kind loop-gpu-device under WORK/results/<machine>/: the comparison and served tables, the files the
    twins were built from and each twin's LoopReport (`reports`), so `harness micro import-device` files it with the
    call's micro runs."""
    reports = reports or {}

    w = Path(work)
    facts = json.loads((w / "facts.json").read_text()) if (w / "facts.json").is_file() else {}
    plan = json.loads((w / "plan.json").read_text()) if (w / "plan.json").is_file() else {}
    served = read_served(w)
    manifest = new_manifest(RUN_KIND, gpu_name=facts.get("gpu_name") or None, command_line=["microbench/device_loop.sh"],
                            extra={"device_loop": {"preset": plan.get("preset"), "facts": facts, "verdict": cmp["verdict"]}})
    with RunWriter(manifest, w / "results") as rw:
        rw.append("device_loop_comparison", [{**r, "measured_values": json.dumps(r["measured_values"])} for r in cmp["rows"]])
        rw.append("device_loop_served", [{k: (json.dumps(v) if isinstance(v, (dict, list, tuple)) else v) for k, v in r.items()}
                                         for r in served])
        for name in ("predictions.json", "comparison.json", "step-time.json", "plan.json", "facts.json",
                     "engine-startup.json"):
            if (w / name).is_file():
                rw.write_json(name, json.loads((w / name).read_text()))
        for t in sorted((w / "twins").glob("*.json")) if (w / "twins").is_dir() else []:
            rw.write_json(f"twin-{t.stem}.json", json.loads(t.read_text()))
        for twin, rep in reports.items():
            if not isinstance(rep, Exception):
                rw.write_json(f"loop-report-{twin}.json", rep.to_dict())
    return rw.path
