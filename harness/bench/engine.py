"""Run the load generator's bench-pd against a launched engine and cross-check it with the engine's counters.

`harness engine CONFIG --bench-pd` = launch (time-to-ready), scrape /metrics, run harness.bench.pd's
bench_pd against the engine's endpoint, scrape again, compare client totals with the counter
deltas (harness.engines.crosscheck), store everything with the engine run, stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.pd import BenchPdOptions, bench_pd
from harness.bench.progress import print_progress
from harness.engines import metrics as prom
from harness.engines.config import ENGINE_CONFIG_DIR
from harness.engines.crosscheck import CrossRow, crosscheck_llama_cpp
from harness.engines.launcher import RunningEngine
from harness.errors import HarnessError

DEFAULT_SCENARIO = ENGINE_CONFIG_DIR / "bench-pd-cpu-gemma3.toml"


@dataclass(frozen=True)
class BenchCheck:
    api: str
    run_dir: str
    report_paths: list[str]
    summary: dict[str, Any]
    rows: list[CrossRow]

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api, "run_dir": self.run_dir, "report_paths": self.report_paths, "summary": self.summary,
                "crosscheck": [r.to_dict() for r in self.rows]}


def bench_pd_against(eng: RunningEngine, *, scenario: str | Path = DEFAULT_SCENARIO, duration_s: float = 20.0,
                     rate_per_s: float | None = None, api: str = "chat", results_dir: str = "results",
                     report_dir: str | None = "reports", quiet: bool = True) -> BenchCheck:
    if eng.plan.engine != "llama.cpp":
        raise HarnessError(f"--bench-pd cross-checks llama.cpp's counters; {eng.plan.engine} has other metric names (not done).")
    metrics_proc = next((p for p in eng.plan.processes if p.metrics_path), None)
    if metrics_proc is None:
        raise HarnessError("--bench-pd needs the engine's /metrics for the cross-check; set llama_cpp.metrics = true.")
    from harness.store import Run  # noqa: PLC0415

    opts = BenchPdOptions(scenario=str(scenario), target_url=eng.plan.endpoint, model_name=eng.plan.served_name,
                          metrics_url=metrics_proc.base_url + metrics_proc.metrics_path, duration_s=duration_s,
                          rate_per_s=rate_per_s, api=api, results_dir=results_dir, report_dir=report_dir,
                          command_line=["harness", "engine", eng.plan.config_name, "--bench-pd"])
    before = prom.scrape(metrics_proc.base_url, metrics_proc.metrics_path)
    res = bench_pd(opts, progress=None if quiet else print_progress)
    after = prom.scrape(metrics_proc.base_url, metrics_proc.metrics_path)
    rows = crosscheck_llama_cpp(Run(res.run_dir).table("requests"), before, after)
    return BenchCheck(api, res.run_dir, res.report_paths, res.summary, rows)

