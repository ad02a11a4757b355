"""The configuration of one load run, validated at the boundary (every bad value names its field and the fix)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.errors import HarnessError
from workloads.oversaturation import OversaturationRule


def check_http_url(value: Any, field_name: str) -> str:
    """Accept only http(s)://host[:port][/path]; anything else is refused with the reason."""
    if not isinstance(value, str) or not value:
        raise HarnessError(f"{field_name} must be an http(s) URL such as http://127.0.0.1:8000, got {value!r}.")
    u = urlsplit(value)
    if u.scheme not in ("http", "https"):
        raise HarnessError(f"{field_name} {value!r} is not an http(s) URL (scheme {u.scheme or 'missing'!r}); "
                           "give e.g. http://127.0.0.1:8000 for an OpenAI-compatible server.")
    if not u.hostname:
        raise HarnessError(f"{field_name} {value!r} has no host; give e.g. http://127.0.0.1:8000.")
    if u.username or u.password:
        raise HarnessError(f"{field_name} {value!r} carries credentials; pass the API key with --api-key-env instead, never in a URL.")
    try:
        u.port
    except ValueError:
        raise HarnessError(f"{field_name} {value!r} has an invalid port; give a number from 1 to 65535.") from None
    return value.rstrip("/")


def _num(name: str, v: Any, low: float, strict: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (v <= low if strict else v < low):
        raise HarnessError(f"load config {name} must be a number {'>' if strict else '>='} {low:g}, got {v!r}.")
    return float(v)


@dataclass(frozen=True)
class SummaryOptions:
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_e2e_s: float | None = None
    max_lag_p99_s: float = 0.05  # a run whose p99 send lag exceeds this is invalid
    max_send_shortfall: float = 0.05  # ... or that sent < 95% of the requests its window intended
    max_error_fraction: float = 0.5  # ... or where more than this share of the measured requests failed
    closed_loop: bool = False  # closed-loop run: no schedule to keep, unsent requests are the pool's unused rest
    # the window starts where the run's requests in flight settled (workloads.steady), at warmup_s at the earliest
    warmup_auto: bool = False
    warmup_source: str = ""  # where a fixed warmup_s came from, said with the window (e.g. a twin's predicted steady start)

    def __post_init__(self) -> None:
        for f in ("warmup_s", "cooldown_s"):
            _num(f, getattr(self, f), 0.0)
        for f in ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s"):
            if getattr(self, f) is not None:
                _num(f, getattr(self, f), 0.0, strict=True)
        _num("max_lag_p99_s", self.max_lag_p99_s, 0.0, strict=True)
        _num("max_send_shortfall", self.max_send_shortfall, 0.0)
        if not 0.0 <= _num("max_error_fraction", self.max_error_fraction, 0.0) < 1.0:
            raise HarnessError(f"load config max_error_fraction must be in [0, 1), got {self.max_error_fraction!r}.")


# sidecars a load run writes itself; `LoadConfig.sidecars` may not name them
RESERVED_SIDECARS = ("manifest.json", "summary.json", "plan.json", "gpu_telemetry.json", "profile.json")
ROLES = ("all", "prefill", "decode")  # the pool a metrics endpoint serves


@dataclass(frozen=True)
class LoadConfig:
    target_url: str
    artifact_path: str
    run_id: str
    results_dir: str = "results"
    model: str = "default"
    api_key_env: str | None = None
    workers: int = 0  # 0 (and no remote workers): one local process; N: a Locust master and N local worker processes
    remote_workers: int = 0  # workers the master waits for from other hosts (`locust -f ... --worker --master-host H`)
    master_bind_host: str = "127.0.0.1"  # the master's bind address; remote workers need one they can reach
    master_port: int = 0  # 0: a free port
    worker_wait_s: float = 300.0  # how long the master waits for remote workers to connect
    max_concurrency: int = 256
    request_timeout_s: float = 120.0
    t0_lead_s: float = 1.0
    drain_timeout_s: float = 180.0
    scrape: list[dict[str, str]] = field(default_factory=list)  # [{"role": "prefill", "url": ...}, ...]
    scrape_interval_s: float = 1.0
    # GPU telemetry (workloads.gpu_telemetry): DCGM exporters [{"role", "url"}], this host's NVML, the sampling period
    gpu_metrics: list[dict[str, str]] = field(default_factory=list)
    gpu_local: bool = False
    gpu_interval_s: float = 1.0
    # engine profiling (workloads.profiler): {"window_s": [a, b] s since t0, "window_in_measurement_s": [START, END] as given,
    # "output_dir": DIR or None}
    profile: dict[str, Any] | None = None
    # cut the run short when it is over-saturated (workloads.oversaturation): {"rate_per_s": offered rate, "rule": {...}}
    early_stop: dict[str, Any] | None = None
    fetch_emit_log: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    plan_path: str | None = None
    sidecars: dict[str, str] = field(default_factory=dict)  # {NAME.json: path}: JSON files copied into the run at its start
    summary: SummaryOptions = field(default_factory=SummaryOptions)
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    # a target process the harness launched on this host ({"pid": P, "threads": T}): its CPU is read over the run and its
    # share of its cores judged as the loop judges it (harness.loop_records.stages.CONTENDED_SHARE)
    engine_process: dict[str, int] | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        check_http_url(self.target_url, "target_url")
        for s in self.scrape:
            if not isinstance(s, dict) or set(s) != {"role", "url"}:
                raise HarnessError(f"load config scrape entries must be {{role, url}}, got {s!r}.")
            check_http_url(s["url"], f"{s['role']} metrics URL")
        for s in self.gpu_metrics:
            if not isinstance(s, dict) or set(s) != {"role", "url"} or s["role"] not in ROLES:
                raise HarnessError(f"load config gpu_metrics entries must be {{role, url}} with role one of {', '.join(ROLES)}, "
                                   f"got {s!r}.")
            check_http_url(s["url"], f"--gpu-metrics-url ({s['role']})")
        if not isinstance(self.gpu_local, bool):
            raise HarnessError(f"load config gpu_local must be true or false, got {self.gpu_local!r}.")
        _num("gpu_interval_s", self.gpu_interval_s, 0.0, strict=True)
        if self.early_stop is not None:
            try:
                OversaturationRule(**(self.early_stop.get("rule") or {}))
            except (TypeError, ValueError, AttributeError) as exc:
                raise HarnessError(f"load config early_stop is not {{rate_per_s, rule}} ({exc}).") from None
        if self.profile is not None:
            w = self.profile.get("window_s") if isinstance(self.profile, dict) else None
            if (not isinstance(w, (list, tuple)) or len(w) != 2 or not all(isinstance(x, (int, float)) for x in w)
                    or not 0 <= w[0] < w[1]):
                raise HarnessError(f"load config profile.window_s must be [start, end] seconds since t0 with 0 <= start < end, "
                                   f"got {w!r}.")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or not 0 <= self.workers <= 64:
            raise HarnessError(f"load config workers must be an integer in [0, 64], got {self.workers!r}.")
        if isinstance(self.remote_workers, bool) or not isinstance(self.remote_workers, int) or not 0 <= self.remote_workers <= 1024:
            raise HarnessError(f"load config remote_workers must be an integer in [0, 1024], got {self.remote_workers!r}.")
        if isinstance(self.master_port, bool) or not isinstance(self.master_port, int) or not 0 <= self.master_port <= 65535:
            raise HarnessError(f"load config master_port must be an integer in [0, 65535] (0: a free port), got {self.master_port!r}.")
        if not isinstance(self.master_bind_host, str) or not self.master_bind_host:
            raise HarnessError(f"load config master_bind_host must be an address such as 0.0.0.0 or 10.0.0.5, got {self.master_bind_host!r}.")
        _num("worker_wait_s", self.worker_wait_s, 0.0, strict=True)
        if self.engine_process is not None:
            ep = self.engine_process
            if (not isinstance(ep, dict) or set(ep) != {"pid", "threads"}
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in ep.values())):
                raise HarnessError(f"load config engine_process must be {{pid, threads}} (integers >= 1), got {ep!r}.")
        for name, path in self.sidecars.items():
            if (not isinstance(name, str) or not name.endswith(".json") or "/" in name or "\\" in name or name.startswith(".")
                    or name in RESERVED_SIDECARS):
                raise HarnessError(f"load config sidecars: {name!r} is not a sidecar name (NAME.json, not one of "
                                   f"{', '.join(RESERVED_SIDECARS)}); rename it.")
            if not isinstance(path, str) or not path:  # read by the coordinator only (a remote worker has no such file)
                raise HarnessError(f"load config sidecars[{name!r}]: {path!r} is not a path; give the JSON file to store with the run.")
        if isinstance(self.max_concurrency, bool) or not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise HarnessError(f"load config max_concurrency must be an integer >= 1, got {self.max_concurrency!r}.")
        _num("request_timeout_s", self.request_timeout_s, 0.0, strict=True)
        _num("t0_lead_s", self.t0_lead_s, 0.0)
        _num("drain_timeout_s", self.drain_timeout_s, 0.0)
        _num("scrape_interval_s", self.scrape_interval_s, 0.0, strict=True)
        if self.api_key_env is not None and not self.api_key_env.replace("_", "").isalnum():
            raise HarnessError(f"api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), got {self.api_key_env!r}.")

    def api_key(self) -> str | None:
        """The key itself, read from the environment at use; it is never stored in a config, result or report."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise HarnessError(f"environment variable {self.api_key_env} is empty or unset; export the API key in it.")
        return key

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        return p

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LoadConfig":
        d = dict(d)
        known = set(cls.__dataclass_fields__)
        extra = set(d) - known
        if extra:
            raise HarnessError(f"load config has unknown field(s) {sorted(extra)}; remove them.")
        if isinstance(d.get("summary"), dict):
            d["summary"] = SummaryOptions(**d["summary"])
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> "LoadConfig":
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise HarnessError(f"load config {path} could not be read ({exc}).") from None
