"""What a load run may add beyond the requests (issue 49): GPU telemetry sources, an engine profile window and the
over-saturation cut, parsed, checked and turned into the LoadConfig fields the load process acts on. One module for
every driver of a load run: bench-pd (harness.bench.load_extras re-exports it), the loops (harness.loop.gpu_telemetry)
and plain `locust -f workloads/locustfile.py` (workloads.locust_plugin).

Checked before the run: an exporter that cannot be reached is a warning and the run goes on (its rows then carry the
error); a profile window outside the measurement window is refused. What they recorded is read back from the run by
workloads.run_extras.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError
from harness.telemetry import dcgm
from workloads.config import ROLES, check_http_url
from workloads.gpu_telemetry import local_sampling
from workloads.profiler import absolute_window

GPU_NVML_MODES = ("auto", "on", "off")
GPU_INTERVAL_RANGE_S = (0.05, 60.0)


@dataclass(frozen=True)
class ExtrasOptions:
    """The options `load_config_fields` reads, for a driver without an options record of its own (plain Locust)."""

    gpu_metrics: list[dict[str, str]] = field(default_factory=list)  # DCGM exporters: [{"role", "url"}]
    gpu_nvml: str = "auto"  # auto (the target runs here and NVML sees a GPU), on, off
    gpu_interval_s: float = 1.0
    profile_window: tuple[float, float] | None = None  # seconds into the measurement window
    profile_dir: str | None = None  # sent to /start_profile as output_dir
    early_stop: bool = False
    warmup_s: float = 0.0  # where the measurement window starts (seconds of intended send time)
    cooldown_s: float = 0.0


def parse_gpu_metrics_url(text: str) -> dict[str, str]:
    """`URL` (role all) or `prefill=URL` / `decode=URL` / `all=URL`: one DCGM exporter's /metrics."""
    t = str(text).strip()
    role, sep, rest = t.partition("=")
    if sep and role in ROLES and not role.startswith("http"):
        url = rest
    else:
        role, url = "all", t
    return {"role": role, "url": check_http_url(url, f"--gpu-metrics-url ({role})")}


def check_gpu_options(nvml: Any, interval_s: Any, endpoints: Any) -> None:
    """--gpu-nvml, --gpu-metrics-interval-s and the --gpu-metrics-url entries ({role, url}), each refused by its flag."""
    if nvml not in GPU_NVML_MODES:
        raise HarnessError(f"--gpu-nvml must be one of {', '.join(GPU_NVML_MODES)}, got {nvml!r}.")
    lo, hi = GPU_INTERVAL_RANGE_S
    if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not lo <= interval_s <= hi:
        raise HarnessError(f"--gpu-metrics-interval-s must be in [{lo:g}, {hi:g}] seconds, got {interval_s!r}.")
    for ep in endpoints:
        check_http_url(ep.get("url"), f"--gpu-metrics-url ({ep.get('role')})")


def check_extras(o: Any, *, closed_loop: bool, closed_loop_flag: str = "--concurrency") -> None:
    """The GPU telemetry, profile and early-stop options of `o` (gpu_nvml, gpu_interval_s, gpu_metrics, profile_window,
    profile_dir, early_stop); `closed_loop`: the run has no arrival rate (named by `closed_loop_flag` in the error)."""
    check_gpu_options(o.gpu_nvml, o.gpu_interval_s, o.gpu_metrics)
    if o.profile_window is None and o.profile_dir is not None:
        raise HarnessError("--profile-dir qualifies --profile-window START:END; give the window too, or drop --profile-dir.")
    if o.early_stop and closed_loop:
        raise HarnessError(f"--early-stop judges an open-loop run against its arrival rate; {closed_loop_flag} runs closed loop. "
                           "Drop one of them.")


def check_exporters(endpoints: list[dict[str, str]], *, warn: Any = None) -> list[str]:
    """Read each exporter once before the run; returns a warning per endpoint that gives no GPU sample (the run goes on,
    its rows then carry the error)."""
    out = []
    for ep in endpoints:
        (first, *_) = dcgm.scrape(ep["url"], t_s=0.0, role=ep["role"], timeout_s=5.0)
        if first.error:
            out.append(f"--gpu-metrics-url {ep['url']} ({ep['role']}) gives no GPU sample ({first.error}); the run goes on, and "
                       "its GPU telemetry from there is recorded as failed reads (check the dcgm-exporter address and port, "
                       "default 9400, path /metrics)")
    for w in out:
        (warn or _warn)(w)
    return out


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr, flush=True)


def gpu_local(nvml: str, target_url: str | None) -> bool:
    """Whether to sample this host's GPUs through NVML: `on`, or `auto` when the target runs here and NVML sees a GPU."""
    return nvml == "on" or (nvml == "auto" and local_sampling(target_url))


def load_config_fields(opts: Any, artifact: Any, *, target_url: str | None, warn: Any = None) -> dict[str, Any]:
    """LoadConfig fields for GPU telemetry, the profile window and the early stop of a run (`opts`: gpu_metrics,
    gpu_nvml, gpu_interval_s, profile_window, profile_dir, early_stop, warmup_s, cooldown_s; `artifact`: the workload
    artifact, for the schedule's span and rate)."""
    fields: dict[str, Any] = {"gpu_metrics": list(opts.gpu_metrics), "gpu_interval_s": opts.gpu_interval_s}
    fields["gpu_local"] = gpu_local(opts.gpu_nvml, target_url)
    if opts.gpu_metrics:
        check_exporters(opts.gpu_metrics, warn=warn)
    if opts.profile_window is not None:
        a, b = absolute_window(opts.profile_window, warmup_s=opts.warmup_s, span_s=artifact.span_s, cooldown_s=opts.cooldown_s)
        fields["profile"] = {"window_s": [a, b], "window_in_measurement_s": list(opts.profile_window),
                             "output_dir": opts.profile_dir}
    if opts.early_stop:
        if artifact.closed_loop:
            raise HarnessError("--early-stop judges an open-loop run against its arrival rate; a closed-loop run (--concurrency) "
                               "has none. Drop one of them.")
        sched = artifact.meta.get("schedule") or {}
        fields["early_stop"] = {"rate_per_s": sched.get("mean_rate_per_s"), "rule": {}}
    return fields


def add_gpu_arguments(add: Any, *, during: str = "", nvml_auto: str, choices: bool = True) -> None:
    """The GPU telemetry flags, one definition for bench-pd, the loops and plain Locust. `add`: a parser's or argument
    group's add_argument; `during`: when the samples are taken (" during the served points"); `nvml_auto`: what --gpu-nvml
    auto means there; `choices`: let argparse refuse another --gpu-nvml (else check_gpu_options refuses it, naming it)."""
    add("--gpu-metrics-url", action="append", default=[], metavar="[ROLE=]URL", help=f"a DCGM exporter's /metrics to "
        f"sample GPU telemetry from{during} (repeatable; ROLE prefill or decode for a PD pool, e.g. decode=http://10.0.0.7:9400/metrics)")
    nvml = {"choices": GPU_NVML_MODES} if choices else {}
    add("--gpu-nvml", default="auto", **nvml, help=f"{'' if choices else 'auto, on or off: '}sample this host's GPUs through "
        f"NVML{during} (auto: {nvml_auto})")
    add("--gpu-metrics-interval-s", type=float, default=1.0, help="GPU telemetry sampling period (default 1 s)")


def add_profile_arguments(add: Any, *, dir_note: str = "") -> None:
    """--profile-window and --profile-dir, one definition for bench-pd and plain Locust."""
    add("--profile-window", default=None, metavar="START:END", help="call the target's /start_profile and /stop_profile "
        "from START to END seconds into the measurement window (vLLM, SGLang and the embedded target answer them)")
    add("--profile-dir", default=None, help="with --profile-window: sent as output_dir (where SGLang and the embedded "
        f"target write the trace{dir_note})")


__all__ = ["GPU_NVML_MODES", "ExtrasOptions", "add_gpu_arguments", "add_profile_arguments", "check_exporters", "check_extras", "check_gpu_options", "gpu_local",
           "load_config_fields", "parse_gpu_metrics_url"]
