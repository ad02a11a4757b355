"""The options of one bench-pd run (BenchPdOptions), validated on creation: what `harness bench-pd` and `harness engine`
give harness.bench.pd.bench_pd, and what the workload builder (harness.bench.workload) reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.errors import HarnessError
from workloads.config import check_http_url
from workloads.extras_options import check_extras
from workloads.workload_spec import WorkloadSpec


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
    warmup_auto: bool = True  # the window starts where the requests in flight settled (workloads.steady), >= warmup_s
    warmup_source: str = ""  # where a fixed warmup_s came from (set by twin_window)
    cooldown_s: float = 0.0
    slo_ttft_s: float | None = 5.0
    slo_tpot_s: float | None = 0.05
    slo_e2e_s: float | None = None
    results_dir: str = "results"
    report_dir: str | None = "reports"
    command_line: list[str] = field(default_factory=list)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)  # --input-tokens, --dataset, --trace, ... (workloads.workload_spec)
    concurrency: int | None = None  # closed loop: N users, each sending when its previous request ended
    num_requests: int | None = None  # closed loop: the pool of requests (default concurrency x 32, at most 4096)
    remote_workers: int = 0  # Locust workers on other hosts that join this master (docs/loadgen.md)
    master_bind_host: str = "127.0.0.1"
    master_port: int = 0
    preflight: bool = True  # GET /v1/models and one short request before the run
    max_error_fraction: float = 0.5  # more failed requests than this share make the run invalid
    run_group: dict[str, Any] | None = None  # set by a rate sweep: {"id", "index", "rates"}
    # a real target's prediction: the digital twin of --calibration (a twin.json, or a step-time calibration with
    # --engine-config), run on this run's workload before the load (harness.target.twin_source, .prediction)
    calibration: str | None = None
    engine_config: str | None = None  # a llama.cpp engine config (name or TOML path): the scheduler a step-time twin runs
    proxy: bool = False  # let a calibration of another engine / host / kernel family / threads / model predict (said so)
    # GPU telemetry, engine profiling and the over-saturation cut (harness.bench.load_extras, docs/loadgen.md)
    gpu_metrics: list[dict[str, str]] = field(default_factory=list)  # DCGM exporters: [{"role", "url"}]
    gpu_nvml: str = "auto"  # sample this host's GPUs: auto (when the target runs here and NVML sees a GPU), on, off
    gpu_interval_s: float = 1.0
    profile_window: tuple[float, float] | None = None  # seconds into the measurement window
    profile_dir: str | None = None  # sent to /start_profile as output_dir
    early_stop: bool = False  # cut the run short when it is over-saturated (workloads.oversaturation)
    engine_process: dict[str, int] | None = None  # {"pid", "threads"} of a target the harness launched on this host

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
        for name in ("warmup_s", "cooldown_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise HarnessError(f"--{name.replace('_', '-')} must be a number of seconds >= 0, got {v!r}.")
        if self.warmup_s + self.cooldown_s >= self.duration_s:
            raise HarnessError(f"--warmup-s {self.warmup_s:g} + --cooldown-s {self.cooldown_s:g} leave no measurement window in a "
                               f"--duration-s {self.duration_s:g} run; make the run longer or the warm-up shorter.")
        if self.concurrency is not None:
            if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or not 1 <= self.concurrency <= 100_000:
                raise HarnessError(f"--concurrency must be an integer number of users in [1, 100000], got {self.concurrency!r}.")
            if self.rate_per_s is not None:
                raise HarnessError("--concurrency (closed loop) and --rate (open loop) exclude each other; give one.")
        if self.num_requests is not None and (isinstance(self.num_requests, bool) or not isinstance(self.num_requests, int)
                                              or not 1 <= self.num_requests <= 1_000_000):
            raise HarnessError(f"--num-requests must be an integer in [1, 1000000], got {self.num_requests!r}.")
        if not (isinstance(self.max_error_fraction, (int, float)) and 0 <= self.max_error_fraction < 1):
            raise HarnessError(f"--max-error-fraction must be in [0, 1), got {self.max_error_fraction!r}.")
        if self.calibration is None:
            for flag, given in (("--engine-config", self.engine_config is not None), ("--proxy", self.proxy)):
                if given:
                    raise HarnessError(f"{flag} qualifies --calibration FILE (the twin that predicts the target); give "
                                       f"--calibration too, or drop {flag}.")
        else:
            if not isinstance(self.calibration, str) or not self.calibration.strip():
                raise HarnessError(f"--calibration must be a file path, got {self.calibration!r}.")
            if self.target_url is None:
                raise HarnessError("--calibration predicts a real target: give --target URL. The embedded (simulated) target "
                                   "is the scenario's deployment, whose prediction is the scenario's plan (shown already).")
            if self.concurrency is not None:
                raise HarnessError("--calibration: the twin simulates open-loop arrivals; --concurrency runs closed loop. "
                                   "Drop --concurrency (use --rate) or drop --calibration.")
        _check_extras(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def load_mode(self) -> str:
        return f"closed-loop ({self.concurrency} users)" if self.concurrency else "open-loop"


def _check_extras(o: BenchPdOptions) -> None:
    """The GPU telemetry, profile and early-stop options (workloads.extras_options, shared with the loops and Locust)."""
    check_extras(o, closed_loop=o.concurrency is not None)