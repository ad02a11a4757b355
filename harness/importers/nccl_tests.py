"""nccl-tests `-J` JSON -> micro_cases: one case per (size, out-of-place | in-place) row.

Format (NVIDIA/nccl-tests src/util.cu, JSON_FILE_VERSION 2; version 1 files read alike): {"version",
"start_time", "args", "env", "nccl_version", "config": {..., "blocking_collectives", "per_iter_timing",
"parallel_init" (booleans written as the strings "true" / "false"), "devices": [{"rank", "device_info",
...}]}, "results": [{"size", "count", "type", "redop", "root", "out_of_place": {"time" µs (or "cpu_time"),
"alg_bw" GB/s, "bus_bw" GB/s, "nwrong" (null without validation)} | null, "in_place": {...},
"actual_iterations", "experiment_name"}], "out_of_bounds": {"count", "okay"}, "average_bus_bandwidth":
{"bandwidth", "okay"}, "errors", "end_time"}. A NaN double is written as the string "nan". The time is the
tool's average over its iterations; per-iteration times ("*_per_iter": {"times_us": [...]}) are kept as raw
samples when present. Every field is type-checked: a wrong type is an error naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import HarnessError
from harness.importers import Imported, array, external_measurement, flag, integer, load_json, number, require, table

TOOL = "nccl-tests"
KNOWN_VERSIONS = (1, 2)


def parse(path: str | Path) -> Imported:
    from microbench.case import CaseResult, Peak, Skip, Work
    from microbench.params import CollectiveParams

    d = table(load_json(path, TOOL), "(top level)", str(path), TOOL)
    version = d.get("version")
    if version is not None and integer(version, "version", "top level", TOOL, minimum=1) not in KNOWN_VERSIONS:
        raise HarnessError(f"{TOOL} import: {path}: JSON version {version} is not one this harness reads "
                           f"({', '.join(map(str, KNOWN_VERSIONS))}); upgrade the harness.")
    results = array(require(d, "results", "top level", TOOL), "results", "top level", TOOL)
    args = [str(a) for a in array(d.get("args") or [], "args", "top level", TOOL)]
    op = os.path.basename(args[0]).removesuffix("_perf") if args else "collective"
    cfg = table(d.get("config") or {}, "config", "top level", TOOL)
    devices = [table(x, "config.devices[]", "config", TOOL) for x in array(cfg.get("devices") or [], "devices", "config", TOOL)]
    switches = {k: flag(cfg[k], k, "config", TOOL) for k in ("blocking_collectives", "per_iter_timing", "parallel_init") if k in cfg}
    bounds = d.get("out_of_bounds")
    oob = table(bounds, "out_of_bounds", "top level", TOOL) if bounds is not None else {}
    errors = [str(e) for e in array(d.get("errors") or [], "errors", "top level", TOOL)]
    gpu = devices[0].get("device_info") if devices else None
    # one devices entry per process (a non-MPI run lists only its first GPU): ranks = processes x threads x GPUs
    per_proc = integer(cfg.get("nthreads") or 1, "nthreads", "config", TOOL, minimum=1) * \
        integer(cfg.get("ngpus") or 1, "ngpus", "config", TOOL, minimum=1)
    ranks = max(len(devices), 1) * per_proc
    imp = Imported(TOOL, facts={"nccl_version": d.get("nccl_version"), "json_version": version, "args": args,
                                "ngpus": cfg.get("ngpus"), "gpu_name": str(gpu).strip() if gpu else None,
                                "ranks": ranks, "errors": errors, **switches})
    if oob and "okay" in oob and not flag(oob["okay"], "okay", "out_of_bounds", TOOL):
        imp.facts["out_of_bounds_values"] = oob.get("count")
    peak = Peak(None, None, "nccl-tests import: no link spec applied")
    for k, r0 in enumerate(results):
        where = f"results[{k}]"
        r = table(r0, where, "results", TOOL)
        size = integer(require(r, "size", f"result row {k}", TOOL), "size", where, TOOL, minimum=0)
        name = str(r.get("experiment_name") or op)
        iters = integer(r.get("actual_iterations") or 1, "actual_iterations", where, TOOL, minimum=1)
        for place in ("out_of_place", "in_place"):
            body = r.get(place)
            case = f"{name}-{size}-{place}"
            if body is None:
                continue  # the tool writes null where it measured no out-of-place (trace replay)
            body = table(body, place, where, TOOL)
            t_key = "time" if "time" in body else "cpu_time"
            t_us = number(body.get(t_key), t_key, f"{where}.{place}", TOOL, allow_nan=True)
            if t_us != t_us:
                imp.skips.append(Skip("comm", case, "nccl-tests reported no time (nan)"))
                continue
            if t_us <= 0 or size == 0:
                imp.skips.append(Skip("comm", case, f"nccl-tests reported {t_key} {t_us:g} µs for {size} bytes: no rate to derive"))
                continue
            per_body = r.get(f"{place}_per_iter")
            per = None
            if per_body is not None:
                raw = array(table(per_body, f"{place}_per_iter", where, TOOL).get("times_us") or [], "times_us",
                            f"{where}.{place}_per_iter", TOOL)
                per = [number(x, f"times_us[{i}]", f"{where}.{place}_per_iter", TOOL, positive=True) * 1e-6
                       for i, x in enumerate(raw)]
            m = external_measurement(TOOL, t_us * 1e-6, samples=per or None, n=iters)
            nwrong_raw = body.get("nwrong")
            nwrong = None if nwrong_raw is None else number(nwrong_raw, "nwrong", f"{where}.{place}", TOOL, allow_nan=True)
            notes = () if not nwrong else (f"nccl-tests found {nwrong:g} wrong elements: the result is not valid data",)
            bw = {b: number(body.get(b, 0), b, f"{where}.{place}", TOOL, allow_nan=True) for b in ("alg_bw", "bus_bw")}
            # the typed record calibration fits T(S) = α + S/β from (harness.calibration.fit.collectives)
            params = CollectiveParams.of(
                op=name, num_gpus=ranks, size_bytes=size, implementation="nccl", count=r.get("count"),
                redop=r.get("redop"), placement=place, alg_bw_bytes_per_s=bw["alg_bw"] * 1e9,
                bus_bw_bytes_per_s=bw["bus_bw"] * 1e9, nwrong=nwrong, time_is="mean over the tool's iterations")
            imp.cases.append(CaseResult(
                "comm", case, TOOL, f"{ranks} ranks", str(r.get("type", "")), params.to_params(),
                Work(useful_bytes=float(size)), m, peak, notes=notes, source=TOOL))
    return imp
