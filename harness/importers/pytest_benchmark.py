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

from harness.importers import Imported, external_measurement, load_json, require

TOOL = "pytest-benchmark"


def parse(path: str | Path) -> Imported:
    from microbench.case import CaseResult, Peak, Work

    d = load_json(path, TOOL)
    benches = require(d, "benchmarks", "top level", TOOL)
    mi = d.get("machine_info") or {}
    imp = Imported(TOOL, facts={"tool_version": d.get("version"), "datetime": d.get("datetime"),
                                "cpu": (mi.get("cpu") or {}).get("brand_raw"), "node": mi.get("node"),
                                "commit": (d.get("commit_info") or {}).get("id")})
    for b in benches:
        st = require(b, "stats", f"benchmark {b.get('name')!r}", TOOL)
        m = external_measurement(TOOL, float(require(st, "median", "stats", TOOL)), samples=st.get("data"), n=int(st.get("rounds", 1)),
                                 mean_s=st.get("mean"), min_s=st.get("min"), max_s=st.get("max"), stddev_s=st.get("stddev"),
                                 inner_reps=int(st.get("iterations", 1)))
        extra = b.get("extra_info") or {}
        work = Work(useful_flops=float(extra.get("useful_flops", 0)), useful_bytes=float(extra.get("useful_bytes", 0)),
                    padded_flops=extra.get("padded_flops"), padded_bytes=extra.get("padded_bytes"))
        imp.cases.append(CaseResult(
            b.get("group") or "pytest-benchmark", b["name"], TOOL, "cpu", str(extra.get("dtype", "")),
            {"fullname": b.get("fullname"), "params": b.get("params"), "extra_info": extra, "rounds": st.get("rounds")},
            work, m, Peak(None, None, "pytest-benchmark import: no spec peak applied"), source=TOOL))
    return imp
