"""bench-pd end to end: build the workload, start the embedded target if no URL is given, drive the load
process (harness.bench.load), show progress, stop everything, render the report, and return where the run went.

`bench_pd` is what `harness bench-pd` calls: the chapter's PD scenario at its arrival rate for a
bounded time against the embedded (simulated) target or a real deployment, then the report.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.load import run_load
from harness.bench.progress import Progress
from harness.bench.workload import build_workload
from harness.errors import HarnessError
from workloads.config import LoadConfig, SummaryOptions, check_http_url
from workloads.summary import read_summary


@dataclass(frozen=True)
class BenchPdOptions:
    scenario: str = "workloads/scenarios/ch9-hetero-pd.toml"
    target_url: str | None = None
    metrics_url: str | None = None
    prefill_metrics_url: str | None = None
    decode_metrics_url: str | None = None
    duration_s: float = 60.0
    rate_per_s: float | None = None
    schedule: str = "constant"  # the fluid model of §9.6.1 assumes a steady λ
    mix: str = "scenario"
    workload_path: str | None = None
    seed: int = 0
    api: str = "chat"
    model_name: str | None = None
    api_key_env: str | None = None
    workers: int = 0
    max_concurrency: int = 512
    request_timeout_s: float = 120.0
    time_scale: float = 1.0
    startup_s: float | None = None
    allocation: str = "best"
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    slo_ttft_s: float | None = 5.0
    slo_tpot_s: float | None = 0.05
    slo_e2e_s: float | None = None
    results_dir: str = "results"
    report_dir: str | None = "reports"
    command_line: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.target_url is not None:
            check_http_url(self.target_url, "--target")
        for name in ("metrics_url", "prefill_metrics_url", "decode_metrics_url"):
            v = getattr(self, name)
            if v is not None:
                check_http_url(v, f"--{name.replace('_', '-')}")
        if not (isinstance(self.duration_s, (int, float)) and 0 < self.duration_s <= 24 * 3600):
            raise HarnessError(f"--duration-s must be in (0, 86400] seconds, got {self.duration_s!r}.")
        if self.rate_per_s is not None and not (isinstance(self.rate_per_s, (int, float)) and 0 < self.rate_per_s < 1e6):
            raise HarnessError(f"--rate must be a positive number of requests per second, got {self.rate_per_s!r}.")
        if self.api not in ("chat", "completions"):
            raise HarnessError(f"--api must be 'chat' or 'completions', got {self.api!r}.")
        if not (isinstance(self.time_scale, (int, float)) and 0 < self.time_scale <= 100):
            raise HarnessError(f"--time-scale must be in (0, 100] (wall seconds per simulated second), got {self.time_scale!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchPdResult:
    run_dir: str
    report_paths: list[str]
    summary: dict[str, Any]
    target: str  # "simulated (embedded)" or the URL

    @property
    def valid(self) -> bool:
        return bool(self.summary.get("valid"))

    @property
    def simulated(self) -> bool:
        return self.target.startswith("simulated")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bench_pd(opts: BenchPdOptions, progress: Progress | None = None) -> BenchPdResult:
    from harness.model.plan import plan
    from harness.model.record import as_json
    from harness.specs.scenario import load_scenario
    from harness.store import Run
    from harness.records import new_run_id

    s = load_scenario(opts.scenario)
    workdir = Path(tempfile.mkdtemp(prefix="harness-bench-"))
    artifact_path = build_workload(opts, s, workdir)
    plan_path = workdir / "plan.json"
    plan_path.write_text(json.dumps(as_json(plan(s, include_grid=False))))
    target = None
    try:
        if opts.target_url is None:
            from harness.target.process import start_target

            args = ["--scenario", opts.scenario, "--time-scale", str(opts.time_scale), "--allocation", opts.allocation]
            if opts.startup_s is not None:
                args += ["--startup-s", str(opts.startup_s)]
            bound = opts.duration_s + opts.request_timeout_s + 600
            target = start_target(args, max_lifetime_s=bound)
            url = target.url
            scrape = [{"role": "all", "url": f"{url}/metrics"}, {"role": "prefill", "url": f"{url}/prefill/metrics"},
                      {"role": "decode", "url": f"{url}/decode/metrics"}]
            engine = {"name": "harness-simulated", "simulated": True, **target.info}
            model = target.info.get("model", s.workload.model)
            label = "simulated (embedded)"
        else:
            url = opts.target_url
            scrape = [{"role": "all", "url": opts.metrics_url or f"{url}/metrics"}]
            if opts.prefill_metrics_url:
                scrape.append({"role": "prefill", "url": opts.prefill_metrics_url})
            if opts.decode_metrics_url:
                scrape.append({"role": "decode", "url": opts.decode_metrics_url})
            engine = {"name": "external", "simulated": False, "url": url}
            model = opts.model_name or s.workload.model
            label = url
        cfg = LoadConfig(
            target_url=url, artifact_path=str(artifact_path), run_id=new_run_id("bench-pd"), results_dir=opts.results_dir,
            model=opts.model_name or model, api_key_env=opts.api_key_env, workers=opts.workers,
            max_concurrency=opts.max_concurrency, request_timeout_s=opts.request_timeout_s,
            drain_timeout_s=opts.request_timeout_s + 10.0, scrape=scrape, fetch_emit_log=target is not None,
            extra_body={"ignore_eos": True}, plan_path=str(plan_path),
            summary=SummaryOptions(warmup_s=opts.warmup_s, cooldown_s=opts.cooldown_s, slo_ttft_s=opts.slo_ttft_s,
                                   slo_tpot_s=opts.slo_tpot_s, slo_e2e_s=opts.slo_e2e_s),
            manifest_extra={"command_line": opts.command_line or list(sys.argv), "bench": "bench-pd", "scenario": s.name,
                            "scenario_path": opts.scenario, "options": {k: v for k, v in opts.to_dict().items() if k != "command_line"},
                            "target": label, "time_scale": opts.time_scale if target is not None else None},
            engine=engine,
        )
        run_dir = run_load(cfg, workdir, progress=progress, timeout_s=opts.duration_s + cfg.drain_timeout_s + 120.0)
    finally:
        if target is not None:
            target.stop()
    run = Run(run_dir)
    paths: list[str] = []
    if opts.report_dir:
        from harness.report.bench_pd import render

        paths = [str(p) for p in render(run, Path(opts.report_dir) / run.manifest.run_id)]
    summary = read_summary(run)["load"]
    return BenchPdResult(str(run_dir), paths, summary, label)
