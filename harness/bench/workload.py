"""The workload artifact of a bench-pd run: an existing file (verified), or the named mix on the named schedule."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.bench.pd import BenchPdOptions


def build_workload(opts: "BenchPdOptions", scenario: Any, workdir: Path) -> Path:
    """The artifact for this run: an existing file, or the named mix on the named schedule."""
    from workloads.artifact import load_artifact, save_artifact
    from workloads.mixes import build_mix, startup_burst_schedule
    from workloads.schedule import make_schedule

    if opts.workload_path:
        load_artifact(opts.workload_path)  # verify before the run starts
        return Path(opts.workload_path)
    rate = opts.rate_per_s if opts.rate_per_s is not None else scenario.workload.arrival_rate_per_s
    if not rate > 0:
        raise HarnessError(f"scenario {scenario.name!r} has arrival_rate_per_s = {rate!r}; give --rate R (requests per second).")
    if opts.mix == "startup-burst":
        sched = startup_burst_schedule(rate, scenario.startup.startup_s, opts.duration_s, opts.seed)
    elif opts.schedule in ("constant", "poisson"):
        sched = make_schedule(opts.schedule, rate_per_s=rate, duration_s=opts.duration_s, seed=opts.seed)
    elif opts.schedule == "gamma":
        sched = make_schedule("gamma", rate_per_s=rate, duration_s=opts.duration_s, cv=2.0, seed=opts.seed)
    else:
        raise HarnessError(f"--schedule must be constant, poisson or gamma for bench-pd, got {opts.schedule!r}.")
    w = scenario.workload
    art = build_mix(opts.mix, sched, seed=opts.seed, api=opts.api, input_tokens=w.input_tokens, output_tokens=w.output_tokens,
                    prefix_tokens=w.cached_prefix_tokens)
    return save_artifact(art, workdir)
