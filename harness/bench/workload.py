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
        if opts.workload.custom or opts.concurrency:
            raise HarnessError("--workload replays a stored artifact as it is; drop the workload flags (--input-tokens, "
                               "--dataset, --trace, --concurrency, ...) or drop --workload.")
        load_artifact(opts.workload_path)  # verify before the run starts
        return Path(opts.workload_path)
    w = scenario.workload
    if opts.concurrency or opts.workload.custom:
        from workloads.schedule import closed_loop
        from workloads.workload_spec import build_workload as build_from_spec

        if opts.mix not in ("scenario", "mooncake"):
            raise HarnessError(f"--mix {opts.mix} has its own token counts; use the workload flags (--input-tokens, ...) "
                               "with --mix scenario (the default).")
        if opts.concurrency:
            pool = opts.num_requests or min(opts.concurrency * 32, 4096)
            sched = closed_loop(pool, opts.duration_s, opts.concurrency, opts.seed)
        else:
            sched = _open_loop_schedule(opts, scenario)
        spec = opts.workload
        if spec.prefix_tokens == 0 and spec.input_tokens is None and not spec.dataset and not spec.trace and w.cached_prefix_tokens:
            from dataclasses import replace

            spec = replace(spec, prefix_tokens=w.cached_prefix_tokens)  # the scenario's own shared prefix
        art = build_from_spec(spec, sched, name="custom" if opts.workload.custom else "scenario", seed=opts.seed, api=opts.api,
                              default_input_tokens=w.input_tokens, default_output_tokens=w.output_tokens)
        return save_artifact(art, workdir)
    if opts.mix == "mooncake":
        raise HarnessError("--mix mooncake replays a trace: give it with --trace PATH [--trace-time-scale F].")
    return save_artifact(_named_mix(opts, scenario), workdir)


def _open_loop_schedule(opts: "BenchPdOptions", scenario: Any) -> Any:
    from workloads.schedule import make_schedule

    rate = opts.rate_per_s if opts.rate_per_s is not None else scenario.workload.arrival_rate_per_s
    if not rate > 0:
        raise HarnessError(f"scenario {scenario.name!r} has arrival_rate_per_s = {rate!r}; give --rate R (requests per second).")
    if opts.schedule in ("constant", "poisson"):
        return make_schedule(opts.schedule, rate_per_s=rate, duration_s=opts.duration_s, seed=opts.seed)
    if opts.schedule == "gamma":
        return make_schedule("gamma", rate_per_s=rate, duration_s=opts.duration_s, cv=2.0, seed=opts.seed)
    raise HarnessError(f"--schedule must be constant, poisson or gamma for bench-pd, got {opts.schedule!r}.")


def _named_mix(opts: "BenchPdOptions", scenario: Any) -> Any:
    from workloads.mixes import build_mix, startup_burst_schedule
    from workloads.schedule import make_schedule

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
    return build_mix(opts.mix, sched, seed=opts.seed, api=opts.api, input_tokens=w.input_tokens, output_tokens=w.output_tokens,
                     prefix_tokens=w.cached_prefix_tokens)
