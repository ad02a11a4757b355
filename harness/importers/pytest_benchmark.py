"""pytest-benchmark `--benchmark-json` -> micro_cases: one case per benchmark.

Format (pytest-benchmark): {"machine_info", "commit_info", "benchmarks": [{"group", "name",
"fullname", "params", "extra_info", "options", "stats": {"min", "max", "mean", "stddev",
"rounds", "median", "iqr", "q1", "q3", "iterations", "ops", "data"?}}], "datetime", "version"}.
Raw per-round times ("data", with --benchmark-save-data) become samples; otherwise the summary is
kept. Work comes from extra_info keys useful_flops / useful_bytes (padded_* too) when the
benchmark set them.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError
from harness.importers import Imported, array, external_measurement, integer, load_json, number, require, table

TOOL = "pytest-benchmark"


def parse(path: str | Path) -> Imported:
    from microbench.case import CaseResult, Peak, Work

    d = table(load_json(path, TOOL), "(top level)", str(path), TOOL)
    benches = array(require(d, "benchmarks", "top level", TOOL), "benchmarks", "top level", TOOL)
    mi = d.get("machine_info") or {}
    mi = mi if isinstance(mi, dict) else {}
    cpu = mi.get("cpu") if isinstance(mi.get("cpu"), dict) else {}
    ci = d.get("commit_info") if isinstance(d.get("commit_info"), dict) else {}
    imp = Imported(TOOL, facts={"tool_version": d.get("version"), "datetime": d.get("datetime"),
                                "cpu": cpu.get("brand_raw"), "node": mi.get("node"), "commit": ci.get("id")})
    for k, b0 in enumerate(benches):
        b = table(b0, f"benchmarks[{k}]", "top level", TOOL)
        name = require(b, "name", f"benchmarks[{k}]", TOOL)
        if not isinstance(name, str) or not name:
            raise HarnessError(f"{TOOL} import: benchmarks[{k}].name must be a non-empty string, got {name!r}.")
        where = f"benchmark {name!r} stats"
        st = table(require(b, "stats", f"benchmark {name!r}", TOOL), "stats", f"benchmark {name!r}", TOOL)
        median = number(require(st, "median", "stats", TOOL), "median", where, TOOL, positive=True)
        opt = {f: (None if st.get(f) is None else number(st[f], f, where, TOOL)) for f in ("mean", "min", "max", "stddev")}
        for f in ("mean", "min", "max"):
            if opt[f] is not None and opt[f] <= 0:
                raise HarnessError(f"{TOOL} import: {where}: {f} must be a positive time in seconds, got {opt[f]!r}.")
        if opt["stddev"] is not None and opt["stddev"] < 0:
            raise HarnessError(f"{TOOL} import: {where}: stddev must be >= 0, got {opt['stddev']!r}.")
        data = st.get("data")
        samples = None if data is None else [number(x, f"data[{i}]", where, TOOL, positive=True)
                                             for i, x in enumerate(array(data, "data", where, TOOL))]
        rounds = integer(st.get("rounds", 1), "rounds", where, TOOL, minimum=1)
        iterations = integer(st.get("iterations", 1), "iterations", where, TOOL, minimum=1)
        m = external_measurement(TOOL, median, samples=samples or None, n=rounds, mean_s=opt["mean"], min_s=opt["min"],
                                 max_s=opt["max"], stddev_s=opt["stddev"], inner_reps=iterations)
        extra = b.get("extra_info") or {}
        extra = table(extra, "extra_info", f"benchmark {name!r}", TOOL)
        w = {f: (None if extra.get(f) is None else number(extra[f], f, f"benchmark {name!r} extra_info", TOOL))
             for f in ("useful_flops", "useful_bytes", "padded_flops", "padded_bytes")}
        for f, v in w.items():
            if v is not None and v < 0:
                raise HarnessError(f"{TOOL} import: benchmark {name!r} extra_info: {f} must be >= 0, got {v!r}.")
        work = Work(useful_flops=w["useful_flops"] or 0.0, useful_bytes=w["useful_bytes"] or 0.0,
                    padded_flops=w["padded_flops"], padded_bytes=w["padded_bytes"])
        group = b.get("group")
        imp.cases.append(CaseResult(
            str(group) if group else "pytest-benchmark", name, TOOL, "cpu", str(extra.get("dtype", "")),
            {"fullname": b.get("fullname"), "params": b.get("params"), "extra_info": extra, "rounds": rounds},
            work, m, Peak(None, None, "pytest-benchmark import: no spec peak applied"), source=TOOL))
    return imp
