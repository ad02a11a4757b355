"""The workload artifact of a bench-pd run: an existing file (verified), or the named mix on the named schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.bench.pd_options import BenchPdOptions
from harness.errors import HarnessError
from harness.target.chapter import ChapterScheduler
from harness.target.deployment import deployment_from_scenario
from harness.target.des import ArrivingRequest, simulate
from workloads.artifact import load_artifact, save_artifact
from workloads.config import LoadConfig
from workloads.mixes import build_mix, startup_burst_schedule
from workloads.preflight import time_one_request
from workloads.prompts import prompt_text
from workloads.schedule import closed_loop, make_schedule
from workloads.workload_spec import build_workload as build_from_spec


def build_workload(opts: BenchPdOptions, scenario: Any, workdir: Path) -> Path:
    """The artifact for this run: an existing file, or the named mix on the named schedule."""
    if opts.workload_path:
        if opts.workload.custom or opts.concurrency:
            raise HarnessError("--workload replays a stored artifact as it is; drop the workload flags (--input-tokens, "
                               "--dataset, --trace, --concurrency, ...) or drop --workload.")
        load_artifact(opts.workload_path)  # verify before the run starts
        return Path(opts.workload_path)
    w = scenario.workload
    if opts.concurrency or opts.workload.custom:
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
            spec = replace(spec, prefix_tokens=w.cached_prefix_tokens)  # the scenario's own shared prefix
        art = build_from_spec(spec, sched, name="custom" if opts.workload.custom else "scenario", seed=opts.seed, api=opts.api,
                              default_input_tokens=w.input_tokens, default_output_tokens=w.output_tokens)
        return save_artifact(art, workdir)
    if opts.mix == "mooncake":
        raise HarnessError("--mix mooncake replays a trace: give it with --trace PATH [--trace-time-scale F].")
    return save_artifact(_named_mix(opts, scenario), workdir)


def _open_loop_schedule(opts: BenchPdOptions, scenario: Any) -> Any:
    rate = opts.rate_per_s if opts.rate_per_s is not None else scenario.workload.arrival_rate_per_s
    if not rate > 0:
        raise HarnessError(f"scenario {scenario.name!r} has arrival_rate_per_s = {rate!r}; give --rate R (requests per second).")
    if opts.schedule in ("constant", "poisson"):
        return make_schedule(opts.schedule, rate_per_s=rate, duration_s=opts.duration_s, seed=opts.seed)
    if opts.schedule == "gamma":
        return make_schedule("gamma", rate_per_s=rate, duration_s=opts.duration_s, cv=2.0, seed=opts.seed)
    raise HarnessError(f"--schedule must be constant, poisson or gamma for bench-pd, got {opts.schedule!r}.")


def _named_mix(opts: BenchPdOptions, scenario: Any) -> Any:
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


POOL_MARGIN = 1.25  # a closed loop's pool covers this many times the requests its users can send in the run
POOL_MIN_PER_USER = 8
POOL_MAX_REQUESTS = 20_000
POOL_MAX_PROMPT_TOKENS = 20_000_000  # ~120 MB of synthetic prompt text in the artifact


@dataclass(frozen=True)
class ClosedLoopPool:
    """How many requests a closed loop's workload holds, and why (stored in the run's manifest)."""

    requests: int
    basis: str


def closed_loop_pool(opts: BenchPdOptions, scenario: Any, url: str | None, *, model: str) -> ClosedLoopPool:
    """Enough requests for `opts.concurrency` users to keep sending for the whole run: users × ⌈POOL_MARGIN × duration /
    (one request's time alone)⌉ + users. A request takes at least as long under load as alone, so this is an upper
    bound. One request's time: the scenario's deployment simulated (harness.target.des, no startup) for the embedded
    target (`url` None), else one request timed against `url` before the run (not recorded). Bounded by
    POOL_MAX_REQUESTS and POOL_MAX_PROMPT_TOKENS; a run whose pool runs out anyway says so (workloads.summary)."""
    users = int(opts.concurrency or 1)
    spec, w = opts.workload, scenario.workload
    in_tok = int(round(spec.input_tokens.mean)) if spec.input_tokens is not None else int(w.input_tokens)
    out_tok = int(round(spec.output_tokens.mean)) if spec.output_tokens is not None else int(w.output_tokens)
    if url is None:
        dep = deployment_from_scenario(scenario, allocation=opts.allocation, startup_s=0.0)
        run = simulate(lambda: ChapterScheduler(dep), [ArrivingRequest(0.0, max(1, in_tok), max(1, out_tok))])
        alone_s = float(run.finished_s[0]) * opts.time_scale
        how = f"one request of {in_tok}/{out_tok} tokens takes {alone_s:.3g} s alone on the scenario's deployment (simulated)"
    else:
        key = LoadConfig(target_url=url, artifact_path="-", run_id="probe", api_key_env=opts.api_key_env).api_key()
        alone_s = time_one_request(url, model=model, api=opts.api, prompt=prompt_text(in_tok, 987_654_321, None),
                                   max_tokens=out_tok, api_key=key, timeout_s=opts.request_timeout_s,
                                   extra_body={"ignore_eos": True})
        how = f"one request of {in_tok}/{out_tok} tokens took {alone_s:.3g} s alone (timed before the run, not recorded)"
    per_user = math.ceil(POOL_MARGIN * opts.duration_s / max(alone_s, 1e-3))
    want = users * per_user + users
    cap = min(POOL_MAX_REQUESTS, POOL_MAX_PROMPT_TOKENS // max(1, in_tok))
    n = max(users * POOL_MIN_PER_USER, min(want, cap))
    basis = f"{n} requests = {users} users × ⌈{POOL_MARGIN:g} × {opts.duration_s:g} s / {alone_s:.3g} s⌉ + {users}: {how}"
    if want > cap:
        basis = f"{n} requests (capped from {want}: at most {POOL_MAX_REQUESTS} requests and {POOL_MAX_PROMPT_TOKENS} prompt tokens): {how}"
    return ClosedLoopPool(n, basis)
