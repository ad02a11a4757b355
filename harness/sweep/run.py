"""Run one workload over a grid of target settings and store a sweep run (kind "sweep").

A target is written as in `harness compare-engines`: an engine config with dotted overrides
(llama-cpp-gemma3-270m), or the embedded simulated target (embedded,scenario=PATH,time_scale=0.1).
Every grid point launches the target with the point's settings, replays the same seeded workload,
stops the target, and is scored (harness.sweep.score). Each point's load run is stored as usual;
the sweep run holds table `sweep_points` (one row per point: settings, p50/p95 of TTFT, TPOT, ITL and
E2E, throughput, goodput, reward, Pareto and best flags, the load run's path; for the embedded target also
`target_{ttft,tpot,e2e}_p{50,95,99}_s`, the same requests' latency as the target scheduled it, in simulated
seconds from its emit log: harness.bench.target_latency) and `sweep.json` (options, reward definition, best
point, Pareto front).

Simulated time: the embedded target runs `time_scale` wall seconds per simulated second, so the
schedule is compressed by it (rate / time_scale for duration × time_scale wall seconds), SLOs are
scaled into wall time for the load run, and every latency and rate is converted back to simulated
seconds before scoring; the stored figures are all in the target's own (simulated) time.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tomli_w

from harness.bench.compare_engines import EMBEDDED_KEYS, TargetSpec, engine_config_with_overrides, parse_target, serve
from harness.bench.load import run_load
from harness.bench.target_latency import fetch_emit_log, latency_percentiles, target_latency
from harness.errors import HarnessError
from harness.records import new_manifest, new_run_id
from harness.specs.scenario import load_scenario
from harness.store import Run, RunWriter
from harness.sweep import grid as grid_mod
from harness.sweep.score import ScoredPoint, best_point, pareto_front, reward
from harness.toml_file import load_toml, set_dotted
from workloads.artifact import save_artifact
from workloads.config import LoadConfig, SummaryOptions
from workloads.gpu_telemetry import local_sampling
from workloads.mixes import build_mix
from workloads.schedule import make_schedule
from workloads.summary import read_summary

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")
EMBEDDED_FIXED = ("profile", "scenario", "time_scale")  # set once for the whole sweep, not per point


@dataclass(frozen=True)
class SweepOptions:
    target: str
    grid: tuple[str, ...] = ()
    duration_s: float = 20.0  # in the target's time (simulated seconds for the embedded target)
    rate_per_s: float = 1.0
    schedule: str = "constant"
    input_tokens: int = 256
    output_tokens: int = 32
    seed: int = 0
    api: str = "chat"
    latency: str = "ttft"
    sla_s: float = 1.0
    lam: float = 100.0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    max_concurrency: int = 256
    request_timeout_s: float = 120.0
    warmup_s: float = 0.0
    results_dir: str = "results"
    command_line: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        def pos(name: str, v: Any, flag: str) -> None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise HarnessError(f"{flag} must be a positive number, got {v!r}.")

        pos("duration_s", self.duration_s, "--duration-s")
        pos("rate_per_s", self.rate_per_s, "--rate")
        pos("sla_s", self.sla_s, "--sla-s")
        pos("request_timeout_s", self.request_timeout_s, "--request-timeout-s")
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not math.isfinite(self.lam) or self.lam < 0:
            raise HarnessError(f"--lambda must be a finite number >= 0 (tokens/s per second over the SLA), got {self.lam!r}.")
        for f in ("slo_ttft_s", "slo_tpot_s"):
            v = getattr(self, f)
            if v is not None:
                pos(f, v, f"--{f.replace('_', '-')}")
        if not (isinstance(self.warmup_s, (int, float)) and 0 <= self.warmup_s < self.duration_s):
            raise HarnessError(f"--warmup-s must be in [0, --duration-s) = [0, {self.duration_s:g}), got {self.warmup_s!r}.")
        for f in ("input_tokens", "output_tokens", "max_concurrency"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"--{f.replace('_', '-')} must be an integer >= 1, got {v!r}.")
        if self.latency not in LATENCY_METRICS:
            raise HarnessError(f"--latency must be one of {', '.join(LATENCY_METRICS)}, got {self.latency!r}.")
        if self.schedule not in ("constant", "poisson", "gamma"):
            raise HarnessError(f"--schedule must be constant, poisson or gamma, got {self.schedule!r}.")
        if self.api not in ("chat", "completions"):
            raise HarnessError(f"--api must be chat or completions, got {self.api!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PreparedPoint:
    index: int
    settings: dict[str, Any]
    spec: Any  # harness.bench.compare_engines.TargetSpec with this point's overrides, or None when skipped
    skip_reason: str | None = None


@dataclass(frozen=True)
class SweepResult:
    run_dir: str
    points: list[dict[str, Any]]
    best: dict[str, Any]
    pareto: list[dict[str, Any]]
    time_scale: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _set_dotted(data: dict, key: str, value: Any, source: str) -> None:
    set_dotted(data, key, value, "--grid", source)


def prepare(o: SweepOptions, workdir: Path) -> tuple[Any, list[PreparedPoint], float]:
    """Parse the target and grid, and validate every point before anything runs (engine configs and
    scenario files are rebuilt with the point's values; an invalid point is skipped with the validator's message)."""
    spec = parse_target(o.target, "--target")
    axes = [grid_mod.parse_axis(g) for g in o.grid]
    points = grid_mod.expand(axes)
    if spec.kind == "url" and axes:
        raise HarnessError("--target: a URL is a server already running, whose settings the sweep cannot change; "
                           "give an engine config or embedded[,...] to sweep settings.")
    ts = 1.0
    if spec.kind == "embedded":
        ts = float(spec.overrides.get("time_scale", 1.0))
        if not ts > 0:
            raise HarnessError(f"--target: embedded time_scale must be > 0, got {ts!r}.")
    out = []
    for i, pt in enumerate(points):
        over = dict(spec.overrides)
        if spec.kind == "embedded":
            scen: dict[str, Any] = {}
            for k, v in pt.items():
                if k.startswith("scenario."):
                    scen[k.removeprefix("scenario.")] = v
                elif k in EMBEDDED_FIXED:
                    raise HarnessError(f"--grid {k}: the embedded target's {k} is fixed for the whole sweep; set it in --target.")
                elif k not in EMBEDDED_KEYS:
                    raise HarnessError(f"--grid {k}: the embedded target has no setting {k!r}; known: "
                                       f"{', '.join(x for x in EMBEDDED_KEYS if x not in EMBEDDED_FIXED)}, or scenario.SECTION.FIELD.")
                else:
                    over[k] = v
            if scen:
                if "scenario" not in over:
                    raise HarnessError("--grid scenario.*: the target has no scenario; give embedded,scenario=PATH.")
                try:
                    path = _scenario_variant(Path(str(over["scenario"])), scen, workdir / f"scenario-{i:03d}.toml")
                except HarnessError as exc:
                    out.append(PreparedPoint(i, pt, None, f"invalid setting: {exc}"))
                    continue
                over["scenario"] = str(path)
            out.append(PreparedPoint(i, pt, TargetSpec("embedded", spec.text, overrides=over)))
        elif spec.kind == "engine":
            for k in pt:
                if "." not in k:
                    raise HarnessError(f"--grid {k}: an engine setting must name its section, e.g. llama_cpp.batch_size.")
            over.update(pt)
            s2 = TargetSpec("engine", spec.text, config=spec.config, overrides=over)
            try:
                engine_config_with_overrides(s2)
            except HarnessError as exc:
                out.append(PreparedPoint(i, pt, None, f"invalid setting: {exc}"))
                continue
            out.append(PreparedPoint(i, pt, s2))
        else:
            out.append(PreparedPoint(i, pt, spec))
    if not any(p.spec is not None for p in out):
        raise HarnessError("--grid: every setting is invalid:\n" + "\n".join(f"  {grid_mod.label(p.settings)}: {p.skip_reason}" for p in out))
    return spec, out, ts


def _scenario_variant(base: Path, changes: dict[str, Any], dest: Path) -> Path:
    if not base.is_file():
        raise HarnessError(f"scenario file {str(base)!r} does not exist; give embedded,scenario=PATH to an existing file.")
    data = load_toml(base, "scenario")
    for k, v in changes.items():
        _set_dotted(data, k, v, str(base))
    data["name"] = f"{data.get('name', base.stem)}-sweep"
    dest.write_text(tomli_w.dumps(data))
    load_scenario(dest)  # validate now: the error names the field and the value
    return dest


def latency_stats(df: Any, w0_s: float, w1_s: float, scale: float) -> dict[str, dict[str, float | None]]:
    """p50/p95/p99 of TTFT, TPOT, ITL and E2E (seconds, divided by `scale` into the target's time) over the
    successful requests whose intended send falls in [w0, w1) wall seconds."""
    intended = df["intended_ns"].to_numpy(dtype=float) / 1e9
    ok = df[(df["error_class"] == "ok") & (intended >= w0_s) & (intended < w1_s)]
    cols = {"ttft": ok["ttft_s"], "tpot": ok["tpot_s"], "e2e": ok["e2e_s"]}
    itl: list[float] = []
    for c in ok["chunk_ns"]:
        a = np.asarray(c, dtype=float)
        if a.size >= 2:
            itl.extend((np.diff(a) / 1e9).tolist())
    out: dict[str, dict[str, float | None]] = {}
    for name, vals in [*cols.items(), ("itl", itl)]:
        a = np.asarray([v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float) / scale
        out[name] = ({"count": int(a.size), "p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
                      "p99": float(np.percentile(a, 99))} if a.size else {"count": 0, "p50": None, "p95": None, "p99": None})
    return out


ProgressFn = Callable[[str], None]


def run_sweep(o: SweepOptions, progress: ProgressFn | None = None) -> SweepResult:
    """Measure every point, score it, store the sweep run; returns where it went and the verdict."""
    workdir = Path(tempfile.mkdtemp(prefix="harness-sweep-"))
    spec, points, ts = prepare(o, workdir)
    kw = {"cv": 2.0} if o.schedule == "gamma" else {}
    sched = make_schedule(o.schedule, rate_per_s=o.rate_per_s / ts, duration_s=o.duration_s * ts, seed=o.seed, **kw)
    art = save_artifact(build_mix("scenario", sched, seed=o.seed, api=o.api, input_tokens=o.input_tokens,
                                  output_tokens=o.output_tokens), workdir)
    drain_s = o.request_timeout_s + 10.0
    rows: list[dict[str, Any]] = []
    scored: list[ScoredPoint] = []
    notes: list[str] = []
    for p in points:
        lab = grid_mod.label(p.settings)
        row: dict[str, Any] = {"index": p.index, "label": lab, "settings_json": json.dumps(p.settings, sort_keys=True, default=str),
                               "status": "skipped", "reason": p.skip_reason or "", "load_run_dir": ""}
        if p.spec is None:
            rows.append(row)
            continue
        if progress:
            progress(f"[{p.index + 1}/{len(points)}] {lab}")
        try:
            with serve(p.spec, o.duration_s * ts + drain_s + 600.0) as live:
                cfg = LoadConfig(
                    target_url=live.url, artifact_path=str(art), run_id=new_run_id("sweep-point"), results_dir=o.results_dir,
                    model=live.model, workers=0, max_concurrency=o.max_concurrency, request_timeout_s=o.request_timeout_s,
                    drain_timeout_s=drain_s, scrape=live.scrape, extra_body={"ignore_eos": True}, progress=False,
                    gpu_local=local_sampling(live.url),  # GPU telemetry beside the requests when the target runs on a GPU here
                    summary=SummaryOptions(warmup_s=o.warmup_s * ts,
                                           slo_ttft_s=o.slo_ttft_s * ts if o.slo_ttft_s else None,
                                           slo_tpot_s=o.slo_tpot_s * ts if o.slo_tpot_s else None),
                    manifest_extra={"command_line": list(o.command_line) or ["harness", "sweep"], "bench": "sweep",
                                    "sweep_settings": p.settings, "target": p.spec.to_dict(), "time_scale": ts, **live.extra},
                    engine=live.engine,
                )
                run_dir = run_load(cfg, workdir, progress=None, timeout_s=o.duration_s * ts + drain_s + 120.0)
                ttr = live.extra.get("time_to_ready_s")
                # the embedded target's own schedule, in simulated seconds: free of the machine's delays
                target_lat = None
                if p.spec.kind == "embedded":
                    try:
                        target_lat = target_latency(fetch_emit_log(live.url), ts)
                    except (OSError, ValueError, KeyError) as exc:
                        notes.append(f"{lab}: the target's emit log could not be read ({exc}); no target_* latencies")
        except HarnessError as exc:
            row.update(status="failed", reason=str(exc))
            rows.append(row)
            notes.append(f"{lab}: failed: {exc}")
            continue
        run = Run(run_dir)
        summ = read_summary(run).load
        lat = latency_stats(run.table("requests"), summ.window_start_s, summ.window_end_s, ts)
        tps = summ.output_tokens_per_s * ts
        good = summ.goodput_per_s * ts if summ.goodput_per_s is not None else None
        p95 = lat[o.latency]["p95"]
        row.update(status="ok", load_run_dir=str(run_dir), output_tokens_per_s=tps,
                   request_throughput_per_s=summ.request_throughput_per_s * ts, goodput_per_s=good,
                   goodput_fraction=summ.goodput_fraction, requests_ok=summ.requests_ok,
                   requests_measured=summ.requests_measured, valid=summ.valid,
                   invalid_reasons="; ".join(summ.invalid_reasons), time_to_ready_s=ttr)
        for m, st in lat.items():
            row[f"{m}_p50_s"], row[f"{m}_p95_s"], row[f"{m}_p99_s"] = st["p50"], st["p95"], st["p99"]
        if target_lat is not None:
            req = run.table("requests")
            intended = req["intended_ns"].to_numpy(dtype=float) / 1e9
            ids = req.loc[(req["error_class"] == "ok") & (intended >= summ.window_start_s) & (intended < summ.window_end_s),
                          "response_id"]
            for m, st in latency_percentiles(target_lat, ids).items():
                row[f"target_{m}_p50_s"], row[f"target_{m}_p95_s"], row[f"target_{m}_p99_s"] = st["p50"], st["p95"], st["p99"]
        if p95 is None:
            row.update(status="failed", reason=f"no successful request gave a {o.latency} sample")
            rows.append(row)
            continue
        r = reward(tps, p95, o.sla_s, o.lam)
        row["reward"] = r
        scored.append(ScoredPoint(p.index, lab, tps, p95, r, good, summ.valid))
        rows.append(row)
    if not scored:
        raise HarnessError("sweep: no setting produced a measurement:\n" + "\n".join(f"  {r['label']}: {r['reason']}" for r in rows))
    best = best_point(scored)
    front = pareto_front(scored)
    front_ids = {p.index for p in front}
    for row in rows:
        row["pareto"] = row["index"] in front_ids
        row["best"] = row["index"] == best.index
    if not best.valid:
        notes.append("every run was invalid (the client fell behind its schedule); the best point is a best effort")
    definition = {"reward": "output_tokens_per_s - lambda * max(0, p95(latency) - sla_s)", "latency": o.latency,
                  "sla_s": o.sla_s, "lambda": o.lam, "goodput_slo": {"ttft_s": o.slo_ttft_s, "tpot_s": o.slo_tpot_s},
                  "source": "Chapter 19, §19.7 (reward); search over a grid, not reinforcement learning",
                  "time": "simulated seconds of the embedded target" if spec.kind == "embedded" else "wall seconds"}
    manifest = new_manifest("sweep", command_line=list(o.command_line) or ["harness", "sweep"],
                            extra={"options": o.to_dict(), "target": spec.to_dict(), "time_scale": ts, "reward": definition,
                                   "grid": [grid_mod.parse_axis(g).to_dict() for g in o.grid]}, notes=notes)
    with RunWriter(manifest, o.results_dir) as w:
        # lazy: pandas adds ~0.5 s to sweep's start-up; only the grid's table uses it
        import pandas as pd

        w.append("sweep_points", pd.DataFrame(rows))
        w.write_json("sweep.json", {"reward": definition, "best": best.to_dict(), "pareto": [p.to_dict() for p in front],
                                    "points": rows, "time_scale": ts, "notes": notes})
    return SweepResult(str(w.path), rows, best.to_dict(), [p.to_dict() for p in front], ts, notes)


def default_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


__all__ = ["SweepOptions", "SweepResult", "run_sweep", "prepare", "latency_stats"]
