"""nccl-tests `-J` JSON -> micro_cases: one case per (size, out-of-place | in-place) row.

Format (NVIDIA/nccl-tests src/util.cu, JSON output): {"version", "start_time", "args", "env",
"nccl_version", "config": {..., "devices": [{"rank", "device_info", ...}]}, "results": [{"size",
"count", "type", "redop", "root", "out_of_place": {"time" µs, "alg_bw" GB/s, "bus_bw" GB/s,
"nwrong"}, "in_place": {...}, "actual_iterations", "experiment_name"}], "average_bus_bandwidth",
"errors", "end_time"}. The time is the tool's average over its iterations; per-iteration times
("*_per_iter": {"times_us": [...]}) are kept as raw samples when present.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.importers import Imported, external_measurement, load_json, require

TOOL = "nccl-tests"


def parse(path: str | Path) -> Imported:
    from microbench.case import CaseResult, Peak, Skip, Work

    d = load_json(path, TOOL)
    results = require(d, "results", "top level", TOOL)
    args = d.get("args") or []
    op = os.path.basename(args[0]).removesuffix("_perf") if args else "collective"
    cfg = d.get("config") or {}
    devices = cfg.get("devices") or []
    imp = Imported(TOOL, facts={"nccl_version": d.get("nccl_version"), "args": args, "ngpus": cfg.get("ngpus"),
                                "gpu_name": devices[0].get("device_info") if devices else None,
                                "ranks": len(devices), "errors": d.get("errors", [])})
    peak = Peak(None, None, "nccl-tests import: no link spec applied")
    for r in results:
        size = int(require(r, "size", "a result row", TOOL))
        for place in ("out_of_place", "in_place"):
            body = r.get(place)
            if not body:
                continue
            t_us = body.get("time", body.get("cpu_time"))
            if t_us in (None, "nan"):
                imp.skips.append(Skip("comm", f"{op}-{size}-{place}", "nccl-tests reported no time"))
                continue
            per = (r.get(f"{place}_per_iter") or {}).get("times_us")
            m = external_measurement(TOOL, float(t_us) * 1e-6, samples=[x * 1e-6 for x in per] if per else None,
                                     n=int(r.get("actual_iterations") or 1))
            nwrong = body.get("nwrong")
            notes = () if not nwrong else (f"nccl-tests found {nwrong:g} wrong elements: the result is not valid data",)
            name = r.get("experiment_name") or op
            imp.cases.append(CaseResult(
                "comm", f"{name}-{size}-{place}", TOOL, f"{len(devices) or cfg.get('ngpus', '?')} ranks", str(r.get("type", "")),
                {"op": name, "size": size, "count": r.get("count"), "redop": r.get("redop"), "placement": place,
                 "alg_bw_bytes_per_s": float(body.get("alg_bw", 0)) * 1e9, "bus_bw_bytes_per_s": float(body.get("bus_bw", 0)) * 1e9,
                 "nwrong": nwrong, "time_is": "mean over the tool's iterations"},
                Work(useful_bytes=float(size)), m, peak, notes=notes, source=TOOL))
    return imp
