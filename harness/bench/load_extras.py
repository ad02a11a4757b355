"""What bench-pd adds to a load run beyond the requests (issue 49): GPU telemetry sources, an engine profile window and
the over-saturation cut, as the LoadConfig fields the load process acts on.

Checked before the run: an exporter that cannot be reached is a warning and the run goes on (its rows then carry the
error); a profile window outside the measurement window is refused. What they recorded is read back from the run by
workloads.run_extras.
"""

from __future__ import annotations

import sys
from typing import Any

from harness.errors import HarnessError
from harness.telemetry import dcgm
from workloads.config import ROLES, check_http_url
from workloads.gpu_telemetry import local_sampling
from workloads.profiler import absolute_window

GPU_NVML_MODES = ("auto", "on", "off")


def parse_gpu_metrics_url(text: str) -> dict[str, str]:
    """`URL` (role all) or `prefill=URL` / `decode=URL` / `all=URL`: one DCGM exporter's /metrics."""
    t = str(text).strip()
    role, sep, rest = t.partition("=")
    if sep and role in ROLES and not role.startswith("http"):
        url = rest
    else:
        role, url = "all", t
    return {"role": role, "url": check_http_url(url, f"--gpu-metrics-url ({role})")}


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


def load_config_fields(opts: Any, artifact: Any, *, target_url: str | None) -> dict[str, Any]:
    """LoadConfig fields for GPU telemetry, the profile window and the early stop of a bench-pd run (`artifact`: the
    workload artifact, for the schedule's span and rate)."""
    fields: dict[str, Any] = {"gpu_metrics": list(opts.gpu_metrics), "gpu_interval_s": opts.gpu_interval_s}
    fields["gpu_local"] = opts.gpu_nvml == "on" or (opts.gpu_nvml == "auto" and local_sampling(target_url))
    if opts.gpu_metrics:
        check_exporters(opts.gpu_metrics)
    if opts.profile_window is not None:
        a, b = absolute_window(opts.profile_window, warmup_s=opts.warmup_s, span_s=artifact.span_s, cooldown_s=opts.cooldown_s)
        fields["profile"] = {"window_s": [a, b], "window_in_measurement_s": list(opts.profile_window), "output_dir": opts.profile_dir}
    if opts.early_stop:
        if artifact.closed_loop:
            raise HarnessError("--early-stop judges an open-loop run against its arrival rate; a closed-loop run (--concurrency) "
                               "has none. Drop one of them.")
        sched = artifact.meta.get("schedule") or {}
        fields["early_stop"] = {"rate_per_s": sched.get("mean_rate_per_s"), "rule": {}}
    return fields
