"""A stored run as metric samples for comparison: load runs (per-request latencies, throughput) and micro runs.

Load runs (kind "load", table `requests`, `summary.json`): over the requests measured in the run's
window (intended send in [window_start_s, window_end_s), status ok), the distributions of
  ttft_s  (first content event − send)       tpot_s  ((last − first content event) / (tokens − 1))
  itl_s   (every gap between content events) e2e_s   (last byte − send)
each at p50 / p90 / p99 (metric names ttft_p99_s ...), and the window's rates
  output_tokens_per_s       content events arriving in the window / window length
  request_throughput_per_s  successful requests completing in the window / window length
  goodput_per_s             completions in the window that met every SLO of the run / window length
computed as workloads/summary.py computes them, so the point values equal the run's summary.
Rates are resampled per request (each request's tokens in the window, its completion, its SLO).

Micro runs (kind "micro", tables `micro_cases`, `micro_samples`): per valid case, `<case_id>/median_s`
from the raw samples and its rates `<case_id>/flops_per_s` = useful FLOPs / median (and bytes_per_s).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.compare.stats import Better, MetricSpec
from harness.errors import HarnessError
from harness.store import Run

LATENCY_FAMILIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
LATENCY_STATS = ("p50", "p90", "p99")
RATE_METRICS = ("output_tokens_per_s", "request_throughput_per_s", "goodput_per_s")
# every metric a load run can have (goodput only with an SLO), known before any run is loaded
LOAD_METRICS = tuple(f"{fam.removesuffix('_s')}_{st}_s" for fam in LATENCY_FAMILIES for st in LATENCY_STATS) + RATE_METRICS
CASE_TABLES = ("micro_cases", "cases")
SAMPLE_TABLES = ("micro_samples", "samples")


@dataclass(frozen=True)
class Metric:
    """One comparable metric of a run: its samples and how its value follows from them."""

    name: str  # "ttft_p99_s", "output_tokens_per_s", "gemm:o-t64:torch:cpu:fp32/median_s"
    family: str  # samples shared by several metrics ("ttft_s"), used by the rank test and the CDFs
    spec: MetricSpec
    better: Better
    unit: str  # "s", "tokens/s", "FLOP/s" ...
    samples: np.ndarray = field(repr=False)
    rank_testable: bool = True  # False for per-request contributions to a rate


@dataclass(frozen=True)
class RunData:
    path: str
    run_id: str
    kind: str
    label: str  # engine and settings, as a person reads them
    workload_hash: str | None
    workload_name: str | None
    scenario: str | None
    engine: dict[str, Any]
    created_unix_s: float
    metrics: dict[str, Metric]
    summary: dict[str, Any] = field(default_factory=dict)  # the run's own summary (load) or case rows (micro)
    notes: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)  # flat option -> value, for "how the runs differ"

    def family(self, name: str) -> np.ndarray | None:
        for m in self.metrics.values():
            if m.family == name:
                return m.samples
        return None

    def info(self) -> dict[str, Any]:
        return {"path": self.path, "run_id": self.run_id, "kind": self.kind, "label": self.label,
                "workload_hash": self.workload_hash, "workload_name": self.workload_name, "scenario": self.scenario,
                "engine": self.engine, "created_unix_s": self.created_unix_s, "notes": list(self.notes), "options": self.options}


# manifest keys that describe how a run was made (not what it measured); `options` is flattened into options.*
_OPTION_KEYS = ("bench", "target", "scenario", "workers", "remote_workers", "load_mode", "max_concurrency", "request_timeout_s",
                "time_scale", "api_key_sent")
_NOT_OPTIONS = {"command_line", "results_dir", "report_dir", "run_id"}


def _flat(prefix: str, v: Any, out: dict[str, Any]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), x, out)
    elif isinstance(v, (list, tuple)):
        out[prefix] = ", ".join(map(str, v))
    else:
        out[prefix] = v


def run_options(manifest: Any, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options a run was made with, flattened (`options.rate_per_s`, `engine.version`, `slo.ttft_s` ...)."""
    extra = manifest.extra or {}
    out: dict[str, Any] = {}
    for k in _OPTION_KEYS:
        if k in extra:
            out[k] = extra[k]
    opts = {k: v for k, v in (extra.get("options") or {}).items() if k not in _NOT_OPTIONS}
    _flat("options", opts, out)
    wl = extra.get("workload") or {}
    for k in ("name", "requests", "sessions", "content_hash", "mix", "seed", "tokenizer"):
        if k in wl:
            out[f"workload.{k}"] = wl[k]
    _flat("engine", {k: v for k, v in (manifest.engine or {}).items() if not isinstance(v, (dict, list))}, out)
    if summary:
        _flat("slo", summary.get("slo") or {}, out)
        out["window"] = f"[{summary.get('window_start_s')}, {summary.get('window_end_s')}) s" if "window_start_s" in summary else None
    return out


# options naming a file (and any option `*_path`, e.g. the embedded target's engine.scenario_path): a relative and an
# absolute path to the same file are the same option
_PATH_OPTIONS = ("options.scenario", "options.calibration", "options.engine_config")
# options that only shape the workload a run builds: when both runs replayed one artifact (the same content hash),
# the artifact is the workload and these say nothing about it (a replay's --duration-s is not its schedule's length)
_WORKLOAD_OPTIONS = ("options.duration_s", "options.rate_per_s", "options.schedule", "options.mix", "options.seed",
                     "options.workload_path", "options.num_requests", "options.workload.")


def _path_text(v: Any) -> str | None:
    return os.path.normpath(str(v)) if isinstance(v, (str, os.PathLike)) and str(v) else None


def same_path(a: Any, b: Any) -> bool:
    """Two recorded paths to one file: equal once normalised, or an absolute path ending in the other (relative) one."""
    pa, pb = _path_text(a), _path_text(b)
    if pa is None or pb is None or "://" in str(a) or "://" in str(b):  # a URL is compared as text
        return a == b
    if pa == pb:
        return True
    if os.path.isabs(pa) != os.path.isabs(pb):
        full, rel = (pa, pb) if os.path.isabs(pa) else (pb, pa)
        return not rel.startswith("..") and full.endswith(os.sep + rel)
    return False


def options_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(option, A's value, B's value) for every option that differs, in a stable order, noise left out: paths are
    compared as files (same_path), and the workload-building options drop out when both runs have the same artifact."""
    one_artifact = a.get("workload.content_hash") is not None and a.get("workload.content_hash") == b.get("workload.content_hash")
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if va == vb or ((k in _PATH_OPTIONS or k.endswith("_path")) and same_path(va, vb)):
            continue
        if one_artifact and any(k == w or (w.endswith(".") and k.startswith(w)) for w in _WORKLOAD_OPTIONS):
            continue
        out.append((k, va, vb))
    return out


def run_label(manifest: Any) -> str:
    """What distinguishes this run for a reader: the label compare-engines gave, else engine and version."""
    extra, eng = manifest.extra or {}, manifest.engine or {}
    if extra.get("compare_label"):
        return str(extra["compare_label"])
    if manifest.kind == "micro":
        dev = manifest.gpu_name or manifest.cpu_model
        parts = [dev, f"driver {manifest.gpu_driver}" if manifest.gpu_driver else "", f"torch {manifest.torch_version}" if manifest.torch_version else ""]
        return ", ".join(p for p in parts if p)
    name = eng.get("config") or eng.get("name") or "unknown engine"
    ver = eng.get("version")
    return f"{name} {ver}" if ver not in (None, "", "None") else str(name)


def load_run_data(path: str | Path) -> RunData:
    """Read a stored run (results/<machine>/<run_id>/) into comparable metrics; HarnessError names what is missing."""
    run = Run(path)
    m = run.manifest
    if m.status != "complete":
        note = f"run status is {m.status!r}, not 'complete'"
    else:
        note = ""
    if m.kind == "micro":
        data = _micro(run)
    elif "requests" in run.tables():
        data = _load(run)
    else:
        raise HarnessError(f"{run.path}: a {m.kind!r} run with no `requests` or `micro_cases` table; compare takes load runs "
                           "(harness bench-pd, harness compare-engines) or micro runs (harness micro run).")
    return data if not note else RunData(**{**data.__dict__, "notes": (*data.notes, note)})


def _finite(x: list[Any]) -> np.ndarray:
    a = np.array([np.nan if v is None else float(v) for v in x], dtype=float)
    return a[np.isfinite(a)]


def _load(run: Any) -> RunData:
    m = run.manifest
    df = run.table("requests")
    try:
        summary = run.json("summary.json")
    except (OSError, json.JSONDecodeError):
        summary = {}
    load = summary.get("load", {}) if isinstance(summary, dict) else {}
    span_s = float(summary.get("span_s") or 0.0) if isinstance(summary, dict) else 0.0
    w0 = float(load.get("window_start_s", 0.0))
    n = len(df)
    intended = df["intended_ns"].to_numpy(dtype=float) / 1e9
    if "window_end_s" in load:
        w1 = float(load["window_end_s"])
    else:  # no summary: the whole schedule
        w1 = span_s or float(np.nanmax(intended)) if n else 0.0
    win = max(w1 - w0, 1e-9)
    ok = (df["error_class"] == "ok").to_numpy()
    measured = (intended >= w0) & (intended < w1)
    sel = df[measured & ok]

    metrics: dict[str, Metric] = {}
    fams = {
        "ttft_s": _finite(sel["ttft_s"].tolist()),
        "tpot_s": _finite(sel["tpot_s"].tolist()),
        "e2e_s": _finite(sel["e2e_s"].tolist()),
    }
    gaps = [np.diff(np.asarray(c, dtype=float)) / 1e9 for c in sel["chunk_ns"] if c is not None and len(c) >= 2]
    fams["itl_s"] = np.concatenate(gaps) if gaps else np.zeros(0)
    for fam in LATENCY_FAMILIES:
        base = fam.removesuffix("_s")
        for st in LATENCY_STATS:
            name = f"{base}_{st}_s"
            metrics[name] = Metric(name, fam, MetricSpec(st), "lower", "s", fams[fam])

    # rates: per-request contributions, summed and divided by the window
    last = df["last_byte_ns"].to_numpy(dtype=float) / 1e9
    tokens = np.array([np.count_nonzero((np.asarray(c, dtype=float) / 1e9 >= w0) & (np.asarray(c, dtype=float) / 1e9 < w1))
                       if c is not None and len(c) else 0 for c in df["chunk_ns"]], dtype=float)
    done = (ok & (last >= w0) & (last < w1)).astype(float)
    metrics["output_tokens_per_s"] = Metric("output_tokens_per_s", "tokens_in_window", MetricSpec("sum", 1.0 / win), "higher",
                                            "tokens/s", tokens, rank_testable=False)
    metrics["request_throughput_per_s"] = Metric("request_throughput_per_s", "completed_in_window", MetricSpec("sum", 1.0 / win),
                                                 "higher", "requests/s", done, rank_testable=False)
    slo = load.get("slo") or {}
    if any(v is not None for v in slo.values()):
        meas = df  # goodput shares request throughput's basis: successful completions landing in the window
        good = done.astype(bool)
        if slo.get("ttft_s") is not None:
            good &= meas["ttft_from_intended_s"].astype(float).fillna(np.inf).to_numpy() <= slo["ttft_s"]
        if slo.get("tpot_s") is not None:
            good &= meas["tpot_s"].astype(float).fillna(0.0).to_numpy() <= slo["tpot_s"]
        if slo.get("e2e_s") is not None:
            good &= meas["e2e_from_intended_s"].astype(float).fillna(np.inf).to_numpy() <= slo["e2e_s"]
        metrics["goodput_per_s"] = Metric("goodput_per_s", "good_in_window", MetricSpec("sum", 1.0 / win), "higher", "requests/s",
                                          good.astype(float), rank_testable=False)
    wl = (m.extra or {}).get("workload") or {}
    notes = []
    if load and not load.get("valid", True):
        notes.append("the run is INVALID: " + "; ".join(load.get("invalid_reasons", [])))
    errs = int((~ok).sum())
    if errs:
        notes.append(f"{errs} of {n} requests failed or were not sent")
    return RunData(
        path=str(run.path), run_id=m.run_id, kind="load", label=run_label(m), workload_hash=wl.get("content_hash"),
        workload_name=wl.get("name"), scenario=(m.extra or {}).get("scenario"), engine=dict(m.engine or {}),
        created_unix_s=float(m.created_unix_s), metrics=metrics,
        summary={**load, "window_s": win, "requests_total": n}, notes=tuple(notes), options=run_options(m, load),
    )


def _table(run: Any, names: tuple[str, ...]) -> Any:
    have = run.tables()
    for n in names:
        if n in have:
            return run.table(n)
    raise HarnessError(f"{run.path}: micro run without a {names[0]!r} table; it has: {', '.join(have) or 'none'}.")


def _micro(run: Any) -> RunData:
    m = run.manifest
    cases = _table(run, CASE_TABLES)
    samples = _table(run, SAMPLE_TABLES)
    by_case = {cid: g["time_s"].to_numpy(dtype=float) for cid, g in samples.groupby("case_id", sort=False)}
    metrics: dict[str, Metric] = {}
    notes = []
    rows = []
    for _, c in cases.iterrows():
        cid = str(c["case_id"])
        if not bool(c.get("valid", True)):
            notes.append(f"{cid}: left out, marked invalid by the microbenchmark ({c.get('flags_json', '')})")
            continue
        x = by_case.get(cid)
        if x is None or x.size == 0:
            notes.append(f"{cid}: no raw samples stored; left out")
            continue
        metrics[f"{cid}/median_s"] = Metric(f"{cid}/median_s", cid, MetricSpec("median"), "lower", "s", x)
        for col, unit in (("useful_flops", "FLOP/s"), ("useful_bytes", "bytes/s")):
            work = float(c.get(col) or 0.0)
            if work > 0 and math.isfinite(work):
                rate = col.removeprefix("useful_") + "_per_s"
                metrics[f"{cid}/{rate}"] = Metric(f"{cid}/{rate}", cid, MetricSpec("median", work, reciprocal=True), "higher", unit, x)
        rows.append({"case_id": cid, "suite": c.get("suite"), "median_s": float(c["median_s"])})
    suites = (m.extra or {}).get("suites")
    return RunData(
        path=str(run.path), run_id=m.run_id, kind="micro", label=run_label(m), workload_hash=None, workload_name=None,
        scenario=",".join(suites) + (" (quick)" if (m.extra or {}).get("quick") else "") if suites else None,
        engine={"torch": m.torch_version, "gpu": m.gpu_name, "driver": m.gpu_driver, "cpu": m.cpu_model},
        created_unix_s=float(m.created_unix_s), metrics=metrics, summary={"cases": rows}, notes=tuple(notes),
        options=run_options(m),
    )
