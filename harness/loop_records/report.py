"""The loop's result record (loop_report.json): its settings, the isolated stages, every served point with its
prediction, its measurement and their comparison (harness.served), the verdicts and the diagnostics.

LOOP_REPORT_SCHEMA_VERSION format history (harness.versioning: one upgrade step per version, applied on load; a
newer file is refused):
1 — unversioned loop_report.json (stages only: prefill, TTFT, decode at batch B).
2 — schema_version, status, served-load points (twin prediction vs load generator), capacity, verdict, twin spec.
3 — stage windows, the windows each served point was predicted from, the verdict per window mode; request checks
    carry their window.
4 — the served points as harness.served records (ServedPoint, ServedPrediction, ServedMeasurement, ServedComparison:
    errors and targets as signed fractions, `capacity_rps` named `capacity_requests_per_s`), each point's load runs,
    the repeatability verdict, typed settings; the host sentinel, speed probe, host speed fit, conditioning and
    single-window bands are gone (their columns are dropped on upgrade).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from harness.errors import HarnessError
from harness.loop_records.stages import CONTENDED_SHARE, CpuConstants, StageComparison, StageMeasurement, StagePrediction
from harness.loop_records.steps import StepRow
from harness.loop_records.verdict import AbsoluteVerdict, RepeatabilityVerdict
from harness.loop_records.windows import StageWindow
from harness.served import (Interval, Percentiles, ServedComparison, ServedMeasurement, ServedPoint, ServedPrediction, metric,
                            record_from_dict)
from harness.target.stage_requests import RequestCheck
from harness.versioning import load_versioned, stamp_version

LOOP_REPORT_FILE = "loop_report.json"
LOOP_REPORT_SCHEMA_VERSION = 4


@dataclass(frozen=True)
class LoadRun:
    """One load run of a served point against the engine: where it is stored and the engine's side of it."""

    run_dir: str
    repeat: int
    requests_total: int
    requests_ok: int
    errors_by_class: dict[str, int]
    engine_busy_s: float  # union of [sent, last byte] over the requests: the engine had work
    engine_cpu_share: float | None  # engine CPU-s / (busy_s × threads); None: not read (a remote target)
    engine_prompt_tokens_median: float | None = None  # timings.prompt_n as the engine counted
    engine_output_tokens_median: float | None = None

    @property
    def contended(self) -> bool:
        return self.engine_cpu_share is not None and self.engine_cpu_share < CONTENDED_SHARE

    @property
    def unreachable(self) -> bool:
        """No request reached the engine (every one failed to connect)."""
        return self.requests_ok == 0 and set(self.errors_by_class) <= {"connect"}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "load run") -> "LoadRun":
        return record_from_dict(cls, d, source, errors_by_class=lambda x: {str(k): int(v) for k, v in (x or {}).items()})


@dataclass(frozen=True)
class LoopPoint:
    """One served point of the loop: its identity, the fraction of the predicted capacity it was set at (inf: a
    capacity burst), the twin's prediction (simulated), and — once measured — the median of its load runs."""

    point: ServedPoint
    fraction: float
    requests: int
    prediction: ServedPrediction
    simulate_s: float  # wall seconds the prediction took
    windows: tuple[int, ...] = (0,)  # the stage windows whose corrections made the twin that predicted it
    measurement: ServedMeasurement | None = None
    runs: tuple[LoadRun, ...] = ()

    @property
    def burst(self) -> bool:
        return self.point.burst

    @property
    def engine_cpu_share(self) -> float | None:
        """The lowest share over the runs (a point is contended when any run was)."""
        shares = [r.engine_cpu_share for r in self.runs if r.engine_cpu_share is not None]
        return min(shares) if shares else None

    @property
    def contended(self) -> bool:
        return any(r.contended for r in self.runs)

    @property
    def cancelled(self) -> int:
        """Requests still running at the drain limit (--quick), over the runs."""
        return sum(int(r.errors_by_class.get("cancelled", 0)) for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point.to_dict(), "fraction": self.fraction, "requests": self.requests,
                "prediction": self.prediction.to_dict(), "simulate_s": self.simulate_s, "windows": list(self.windows),
                "measurement": None if self.measurement is None else self.measurement.to_dict(),
                "runs": [r.to_dict() for r in self.runs]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "loop point") -> "LoopPoint":
        return record_from_dict(cls, d, source, point=lambda p: ServedPoint.from_dict(p, source),
                     prediction=lambda p: ServedPrediction.from_dict(p, source), windows=tuple,
                     measurement=lambda m: None if m is None else ServedMeasurement.from_dict(m, source),
                     runs=lambda rs: tuple(LoadRun.from_dict(r, source) for r in rs or ()))


@dataclass(frozen=True)
class MixCapacity:
    """The twin's capacity for one mix: throughput at saturation, for the mix's capacity burst (`burst_requests`) or a
    long simulated backlog (None)."""

    requests_per_s: float
    output_tokens_per_s: float
    burst_requests: int | None = None
    windows: tuple[int, ...] = (0,)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "capacity") -> "MixCapacity":
        return record_from_dict(cls, d, source, windows=tuple, burst_requests=lambda n: None if n is None else int(n))


@dataclass(frozen=True)
class LoopSettings:
    """What the loop ran with (the CPU loop's stage fields are None in a GPU loop)."""

    config: str
    mixes: tuple[tuple[int, int], ...]
    rate_fractions: tuple[float, ...]
    point_duration_s: float
    seed: int
    repeats: int = 1
    capacity_requests: int = 0
    schedule: str = "poisson"
    quick: bool = False
    threads: int | None = None
    prompt_tokens: int | None = None
    decode_prompt_tokens: int | None = None
    output_tokens: int | None = None
    batches: tuple[int, ...] = ()
    reps: int | None = None
    stage_windows: int = 0
    stage_reps: tuple[int, ...] = ()
    kv_dtype: str | None = None
    gpu: str | None = None
    dtype: str | None = None
    target_url: str | None = None
    load_average_before: float | None = None
    load_average_after: float | None = None
    loop_wall_s: float | None = None
    time_to_ready: dict[str, Any] | None = None  # harness.engines.launcher's TimeToReady document
    time_budget: dict[str, Any] | None = None  # harness.loop.budget.BudgetPlan document
    window_plan: dict[str, Any] | None = None  # the pre-window plan's estimates (harness.loop.budget)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "loop settings") -> "LoopSettings":
        return record_from_dict(cls, d, source, mixes=lambda m: tuple(tuple(int(x) for x in p) for p in m or ()),
                     rate_fractions=lambda r: tuple(float(x) for x in r or ()), batches=lambda b: tuple(int(x) for x in b or ()),
                     stage_reps=lambda b: tuple(int(x) for x in b or ()))


@dataclass(frozen=True)
class LoopReport:
    """One loop run (kind loop-cpu or loop-gpu), complete or failed midway (what was measured before is kept)."""

    kind: str
    model: dict[str, Any]  # the model's facts as the manifest records them (GGUF facts, or the GPU loop's model spec)
    engine: dict[str, Any]  # the engine as the manifest records it
    settings: LoopSettings
    status: str = "complete"  # complete | failed
    error: str | None = None
    run_dir: str | None = None
    notes: tuple[str, ...] = ()
    constants: CpuConstants | None = None
    stage_predictions: tuple[StagePrediction, ...] = ()
    stage_measurements: tuple[StageMeasurement, ...] = ()
    stage_comparisons: tuple[StageComparison, ...] = ()
    checks: tuple[RequestCheck, ...] = ()
    twin: dict[str, Any] | None = None  # harness.target.twin.twin_dict of the twin that made the compared prediction
    capacity: dict[str, MixCapacity] = field(default_factory=dict)  # by mix ("512/64")
    points: tuple[LoopPoint, ...] = ()
    comparisons: tuple[ServedComparison, ...] = ()
    verdict: AbsoluteVerdict | None = None
    repeatability: RepeatabilityVerdict | None = None
    first_window_verdict: AbsoluteVerdict | None = None  # with stage window 1 alone (how the points were planned)
    served_steps: tuple[StepRow, ...] = ()
    stage_windows: tuple[StageWindow, ...] = ()

    def point(self, index: int) -> LoopPoint | None:
        return next((p for p in self.points if p.point.index == index), None)

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind, "status": self.status, "error": self.error, "model": self.model, "engine": self.engine,
             "settings": self.settings.to_dict(), "run_dir": self.run_dir, "notes": list(self.notes),
             "constants": None if self.constants is None else self.constants.to_dict(),
             "stage_predictions": [x.to_dict() for x in self.stage_predictions],
             "stage_measurements": [x.to_dict() for x in self.stage_measurements],
             "stage_comparisons": [x.to_dict() for x in self.stage_comparisons], "checks": [x.to_dict() for x in self.checks],
             "twin": self.twin, "capacity": {k: v.to_dict() for k, v in self.capacity.items()},
             "points": [p.to_dict() for p in self.points], "comparisons": [c.to_dict() for c in self.comparisons],
             "verdict": None if self.verdict is None else self.verdict.to_dict(),
             "repeatability": None if self.repeatability is None else self.repeatability.to_dict(),
             "first_window_verdict": None if self.first_window_verdict is None else self.first_window_verdict.to_dict(),
             "served_steps": [x.to_dict() for x in self.served_steps], "stage_windows": [w.to_dict() for w in self.stage_windows]}
        return stamp_version(d, LOOP_REPORT_SCHEMA_VERSION)

    @classmethod
    def from_dict(cls, data: Any, source: str = LOOP_REPORT_FILE) -> "LoopReport":
        """The report from its stored document, upgraded step by step from any older version."""
        d = load_versioned(data, LOOP_REPORT_SCHEMA_VERSION, LOOP_REPORT_UPGRADES, source, default=1, what="loop report",
                           fix="the run is damaged; rerun the loop")
        opt = (lambda f: (lambda x: None if x is None else f(x, source)))
        many = (lambda f: (lambda xs: tuple(f(x, source) for x in xs or ())))
        return record_from_dict(cls, {k: v for k, v in d.items() if k != "schema_version"}, source,
                     settings=lambda s: LoopSettings.from_dict(s or {}, source), notes=tuple,
                     constants=opt(CpuConstants.from_dict), stage_predictions=many(StagePrediction.from_dict),
                     stage_measurements=many(StageMeasurement.from_dict), stage_comparisons=many(StageComparison.from_dict),
                     checks=many(RequestCheck.from_dict),
                     capacity=lambda c: {str(k): MixCapacity.from_dict(v, source) for k, v in (c or {}).items()},
                     points=many(LoopPoint.from_dict), comparisons=many(ServedComparison.from_dict),
                     verdict=opt(AbsoluteVerdict.from_dict), repeatability=opt(RepeatabilityVerdict.from_dict),
                     first_window_verdict=opt(AbsoluteVerdict.from_dict), served_steps=many(StepRow.from_dict),
                     stage_windows=many(StageWindow.from_dict))


# ---------------------------------------------------------------- upgrade steps (asv's update_to_N)

def _1_to_2(d: dict[str, Any]) -> dict[str, Any]:
    """A stages-only loop report (before the served-load loop): complete, no served points."""
    return {**d, "status": d.get("status", "complete"), "error": d.get("error"), "twin": None, "capacity": {}, "served": [],
            "served_comparisons": [], "verdict": None}


def _2_to_3(d: dict[str, Any]) -> dict[str, Any]:
    """A loop report before stage windows: its one stage measurement is window 0, every point was predicted from it."""
    return {**d, "stage_windows": d.get("stage_windows", []), "window_verdicts": d.get("window_verdicts", {}),
            "served": [{**p, "stage_windows": p.get("stage_windows", [0])} for p in d.get("served") or []],
            "checks": [{**c, "window": c.get("window", 0)} for c in d.get("checks") or []]}


def _mix(name: str) -> tuple[int | None, int | None]:
    try:
        a, b = name.split("/", 1)
        return int(a), int(b)
    except ValueError:
        return None, None


def _pct(v: Any) -> float | None:
    return None if v is None else float(v) / 100.0


def _3_to_4(d: dict[str, Any]) -> dict[str, Any]:
    """The served points onto harness.served's records (percent → fraction, capacity_rps → capacity_requests_per_s),
    the stage comparisons' error a fraction, typed settings; the dropped diagnostics' columns go."""
    s = dict(d.get("settings") or {})
    before, after = (list(s.get("load_average_1m_before_after") or []) + [None, None])[:2]
    settings = {**{k: v for k, v in s.items() if k in LoopSettings.__dataclass_fields__},
                "config": s.get("config", "?"), "mixes": s.get("mixes") or [], "rate_fractions": s.get("rate_fractions") or [],
                "point_duration_s": float(s.get("point_duration_s") or 0.0), "seed": int(s.get("seed") or 0),
                "load_average_before": before, "load_average_after": after, "stage_windows": int(s.get("stage_windows") or 0),
                "capacity_requests": int(s.get("capacity_requests") or 0),
                # not stored before format 4: as many as the comparisons kept
                "repeats": max([len(r.get("repeat_values") or []) for r in d.get("served_comparisons") or []] + [1])}
    caps = {str(k): {"requests_per_s": float(v["requests_per_s"]), "output_tokens_per_s": float(v["output_tokens_per_s"]),
                     "burst_requests": None if v.get("burst_requests") is None else int(v["burst_requests"]),
                     "windows": list(v.get("stage_windows") or [0])}
            for k, v in (d.get("capacity") or {}).items()}
    rows_by_point: dict[int, list[dict[str, Any]]] = {}
    for r in d.get("served_comparisons") or []:
        rows_by_point.setdefault(int(r["point"]), []).append(r)
    points, comparisons = [], []
    for p in d.get("served") or []:
        pt = ServedPoint(p.get("input_tokens"), p.get("output_tokens"), rate_per_s=float(p["rate_per_s"]), workload=p["mix"],
                         index=int(p["point"]))
        f = p.get("predicted") or {}
        n = int(f.get("requests_measured") or 0)
        pred = ServedPrediction(pt, "twin (simulated), stored before format 4", ttft_s=Percentiles(n, p50=f.get("ttft_p50_s"), p90=f.get("ttft_p90_s")),
                                tpot_s=Percentiles(n, p50=f.get("tpot_p50_s")), e2e_s=Percentiles(n, p50=f.get("e2e_p50_s")),
                                request_throughput_per_s=f.get("request_throughput_per_s"), output_tokens_per_s=f.get("output_tokens_per_s"),
                                capacity_requests_per_s=(caps.get(p["mix"]) or {}).get("requests_per_s"))
        m = p.get("measured")
        meas, runs = None, []
        if m:
            meas, runs = _v3_measurement(pt, m), [_v3_run(m)]
        points.append({"point": pt.to_dict(), "fraction": float(p["rate_fraction_of_capacity"]), "requests": int(p.get("requests") or 0),
                       "prediction": pred.to_dict(), "simulate_s": float(p.get("simulate_s") or 0.0),
                       "windows": list(p.get("stage_windows") or [0]), "measurement": None if meas is None else meas.to_dict(),
                       "runs": runs})
        if rows_by_point.get(pt.index):
            comparisons.append(_v3_comparison(pt, rows_by_point[pt.index], pred.source, "" if m is None else m.get("run_dir", "")))
    served_ids = {int(p["point"]) for p in d.get("served") or []}
    for idx, rows in rows_by_point.items():  # the capacity bursts: comparison rows without a served point
        if idx in served_ids:
            continue
        mix = rows[0]["mix"]
        i, o = _mix(mix)
        pt = ServedPoint(i, o, rate_per_s=math.inf, workload=mix, index=idx)
        cap = caps.get(mix) or {}
        row = rows[0]
        pred = ServedPrediction(pt, "twin (simulated), stored before format 4", capacity_requests_per_s=row.get("predicted"))
        meas = ServedMeasurement(pt, "capacity burst, stored before format 4", capacity_requests_per_s=row.get("measured"))
        points.append({"point": pt.to_dict(), "fraction": math.inf, "requests": int(cap.get("burst_requests") or 0),
                       "prediction": pred.to_dict(), "simulate_s": 0.0, "windows": list(cap.get("windows") or [0]),
                       "measurement": meas.to_dict(), "runs": []})
        comparisons.append(_v3_comparison(pt, rows, pred.source, meas.source))
    v, first = d.get("verdict"), (d.get("window_verdicts") or {}).get("first")

    def verdict(x: Any) -> Any:
        return None if not x else {"judged": x["judged"], "within": x["met"], "contended_points": x["contended_points"],
                                   "points": x["points"], "failures": list(x.get("failures") or [])}

    steps = [{**{k: v for k, v in r.items() if not k.endswith("_error_pct")}, "median_error": _pct(r.get("median_error_pct")),
              "mean_error": _pct(r.get("mean_error_pct"))} for r in d.get("served_steps") or []]
    return {"kind": "loop-cpu" if "gguf" in (d.get("model") or {}) else "loop-gpu", "status": d.get("status", "complete"),
            "error": d.get("error"), "model": d.get("model") or {}, "engine": d.get("engine") or {}, "settings": settings,
            "run_dir": d.get("run_dir"), "notes": list(d.get("notes") or []), "constants": d.get("constants"),
            "stage_predictions": list(d.get("predicted") or []), "stage_measurements": list(d.get("measured") or []),
            "stage_comparisons": [{**{k: v for k, v in c.items() if k != "error_pct"}, "error": _pct(c.get("error_pct"))}
                                  for c in d.get("comparisons") or []],
            "checks": list(d.get("checks") or []), "twin": d.get("twin"), "capacity": caps,
            "points": sorted(points, key=lambda p: p["point"]["index"]), "comparisons": comparisons,
            "verdict": verdict(v), "repeatability": None, "first_window_verdict": verdict(first), "served_steps": steps,
            "stage_windows": list(d.get("stage_windows") or [])}


def _v3_measurement(pt: ServedPoint, m: Mapping[str, Any]) -> ServedMeasurement:
    ivs = {}
    for name in ("ttft_p50", "tpot_p50"):
        iv = m.get(f"{name}_interval_s")
        if iv:
            ivs[f"{name}_s"] = Interval(float(iv[0]), float(iv[1]), 0.95, m.get(f"{name}_interval_n"), "order statistics")
    ok = int(m.get("requests_ok") or 0)
    return ServedMeasurement(pt, str(m.get("run_dir", "")), ttft_s=Percentiles(ok, p50=m.get("ttft_p50_s"), p90=m.get("ttft_p90_s")),
                             tpot_s=Percentiles(ok, p50=m.get("tpot_p50_s")), e2e_s=Percentiles(ok, p50=m.get("e2e_p50_s")),
                             request_throughput_per_s=m.get("request_throughput_per_s"), output_tokens_per_s=m.get("output_tokens_per_s"),
                             capacity_requests_per_s=m.get("saturated_rps"), requests_ok=ok,
                             requests_total=int(m.get("requests_total") or 0), intervals=ivs)


def _v3_run(m: Mapping[str, Any]) -> dict[str, Any]:
    return {"run_dir": str(m.get("run_dir", "")), "repeat": 0, "requests_total": int(m.get("requests_total") or 0),
            "requests_ok": int(m.get("requests_ok") or 0), "errors_by_class": dict(m.get("errors_by_class") or {}),
            "engine_busy_s": float(m.get("engine_busy_s") or 0.0), "engine_cpu_share": m.get("engine_cpu_share"),
            "engine_prompt_tokens_median": m.get("engine_prompt_tokens_median"),
            "engine_output_tokens_median": m.get("engine_output_tokens_median")}


def _v3_comparison(pt: ServedPoint, rows: list[dict[str, Any]], predicted_by: str, measured_by: str) -> dict[str, Any]:
    out = []
    for r in rows:
        name = "capacity_requests_per_s" if r["metric"] == "capacity_rps" else r["metric"]
        metric(name)
        iv = (None if r.get("meas_lo") is None else
              Interval(float(r["meas_lo"]), float(r["meas_hi"]), 0.95, r.get("meas_n"), "order statistics").to_dict())
        out.append({"metric": name, "predicted": r.get("predicted"), "measured": r.get("measured"), "error": _pct(r.get("error_pct")),
                    "target": _pct(r.get("target_pct")), "within": r.get("met"), "note": r.get("note") or "",
                    "measured_interval": iv, "repeat_values": list(r.get("repeat_values") or [])})
    return {"point": pt.to_dict(), "rows": out, "predicted_by": predicted_by, "measured_by": measured_by, "simulated": True}


LOOP_REPORT_UPGRADES = {1: _1_to_2, 2: _2_to_3, 3: _3_to_4}


def read_loop_report(run: Any) -> LoopReport:
    """The loop report of a stored run (harness.store.Run); a clear error when the run has none."""
    p = run.path / LOOP_REPORT_FILE
    if not p.is_file():
        raise HarnessError(f"{run.path} has no {LOOP_REPORT_FILE}: it is not a loop run, or it was stopped before the report "
                           "was written; rerun `harness loop cpu` (or `harness loop gpu`).")
    return LoopReport.from_dict(run.json(LOOP_REPORT_FILE), str(p))


__all__ = ["LOOP_REPORT_FILE", "LOOP_REPORT_SCHEMA_VERSION", "LoadRun", "LoopPoint", "LoopReport", "LoopSettings", "MixCapacity",
           "read_loop_report"]
