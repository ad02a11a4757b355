"""What `harness loop cpu` runs: the user's options (unset = None) and the plan resolved from them (`LoopPlan`: the
layout the loop actually runs, which the time budget may cut)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError
from harness.loop.budget import repeats_of
from harness.target.stage_requests import StageShape
from workloads.extras_options import check_gpu_options, parse_gpu_metrics_url

DEFAULT_MIXES = ((512, 64), (128, 256))
DEFAULT_RATE_FRACTIONS = (0.2, 0.5, 0.8, 1.2)  # of the predicted capacity; 1.2 measures the capacity itself
FULL_POINT_S, QUICK_POINT_S = 50.0, 8.0  # seconds of load per served point (the full loop's fit 15 min, --quick's 3)
DEFAULT_REPS, QUICK_REPS = 3, 1  # repetitions of each stage measurement
DEFAULT_REPEATS = 2  # each served point's workload measured twice back to back: the repeatability verdict needs two
DEFAULT_STAGE_WINDOWS = 3  # before the served points, after about half of them, after the last (harness.loop.windows)
SIDE_REPS = 2  # reps of a stage window's side measurements (LoopPlan.side_reps)
CAPACITY_BURST_PER_SLOT = 5  # the capacity burst's requests per slot: every slot busy to the 80th-percentile completion


@dataclass(frozen=True)
class GpuTelemetryOptions:
    """GPU telemetry during the served points (harness.loop.gpu_telemetry), as bench-pd takes it: this host's NVML
    (`nvml` auto: when the engine runs here and NVML sees a GPU; on; off) and DCGM exporters ({"role", "url"})."""

    nvml: str = "auto"
    endpoints: tuple[dict[str, str], ...] = ()
    interval_s: float = 1.0

    def __post_init__(self) -> None:
        check_gpu_options(self.nvml, self.interval_s, self.endpoints)

    @classmethod
    def from_flags(cls, urls: list[str], nvml: str = "auto", interval_s: float = 1.0) -> GpuTelemetryOptions:
        """From --gpu-metrics-url (each `[ROLE=]URL`), --gpu-nvml and --gpu-metrics-interval-s."""
        return cls(nvml, tuple(parse_gpu_metrics_url(u) for u in urls), interval_s)


@dataclass(frozen=True)
class LoopOptions:
    """The options of `harness loop cpu`; None means "not set" (the plan picks the default, and the time budget may
    cut it); every field is checked on creation (errors name the flag)."""

    config: str = "llama-cpp-gemma3-270m"
    model: str | None = None  # a GGUF path replacing the config's model
    calibration: str | None = None  # an engine step-time calibration (harness.calibration.step_time) for the twin
    proxy: bool = False  # allow a calibration of another kernel family / thread count / model (said so in the report)
    prompt_tokens: int = 512
    decode_prompt_tokens: int = 32
    output_tokens: int = 64
    batches: tuple[int, ...] | None = None  # None: every batch from 1 to the engine's slots (the step is not monotonic in B)
    reps: int | None = None  # None: DEFAULT_REPS, QUICK_REPS with --quick
    quick: bool = False
    stages: bool = True
    served: bool = True
    mixes: tuple[tuple[int, int], ...] | None = None  # None: DEFAULT_MIXES
    rate_fractions: tuple[float, ...] | None = None  # None: DEFAULT_RATE_FRACTIONS (the budget may cut them with --quick)
    point_duration_s: float | None = None  # None: FULL_POINT_S (QUICK_POINT_S with --quick)
    capacity_requests: int | None = None  # None: CAPACITY_BURST_PER_SLOT × slots (0 with --quick); 0: no burst
    repeats: int | None = None  # None: DEFAULT_REPEATS, cut to 1 only when the time budget cannot fit two
    stage_windows: int | None = None  # None: DEFAULT_STAGE_WINDOWS, 1 with --quick
    time_budget_s: float | None = None  # None: 15 min (3 with --quick); 0: none
    copy_cases: bool | None = None  # the prompt cache's copy cases in window 1; None: yes, not with --quick
    seed: int = 0
    results_dir: str | None = "results"
    log_dir: str | None = None
    command_line: tuple[str, ...] = ()
    gpu_telemetry: GpuTelemetryOptions = field(default_factory=GpuTelemetryOptions)

    def __post_init__(self) -> None:
        for name, v, lo in (("--prompt-tokens", self.prompt_tokens, 2), ("--decode-prompt-tokens", self.decode_prompt_tokens, 1),
                            ("--output-tokens", self.output_tokens, 3), ("--seed", self.seed, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise HarnessError(f"{name} must be an integer >= {lo}, got {v!r}.")
        r = self.reps
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
            raise HarnessError(f"--reps must be an integer >= 1, got {r!r}.")
        _int_in("--repeats", self.repeats, 1, 10)
        _int_in("--stage-windows", self.stage_windows, 1, 10, " (1: the stages once, before the served points)")
        if self.batches is not None and (not self.batches or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                                                                 for b in self.batches)):
            raise HarnessError(f"--batches must be positive integers such as 1,2,4, got {self.batches!r}.")
        if self.mixes is not None:
            check_mixes(self.mixes)
        if self.rate_fractions is not None:
            check_rates(self.rate_fractions)
        check_point_duration(self.point_duration_s)
        c = self.capacity_requests
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or not (c == 0 or c >= 10)):
            raise HarnessError(f"--capacity-requests must be 0 (no capacity measurement) or an integer >= 10 (the 20th-80th "
                               f"percentile completion rate needs 10 completions), got {c!r}.")
        if self.calibration is not None and not Path(self.calibration).is_file():
            raise HarnessError(f"--calibration {self.calibration!r} does not exist; give a step-time calibration file "
                               "(`harness step-time fit` writes one) or leave it out to use the roofline constants.")
        if self.model is not None and not str(self.model).endswith(".gguf"):
            raise HarnessError(f"--model must be a .gguf file for llama.cpp, got {self.model!r}.")
        if not (self.stages or self.served):
            raise HarnessError("nothing to measure: --no-stages and --no-served together leave the loop empty; drop one.")
        b = self.time_budget_s
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or not (b == 0 or 60 <= b <= 86400)):
            raise HarnessError(f"--time-budget-min must be 0 (no budget: the loop runs its defaults) or from 1 to 1440 minutes, "
                               f"got {b / 60 if isinstance(b, (int, float)) and not isinstance(b, bool) else b!r} min.")

    @property
    def shape(self) -> StageShape:
        return StageShape(self.prompt_tokens, self.decode_prompt_tokens, self.output_tokens)

    @property
    def budget_s(self) -> float | None:
        """The wall-time budget in seconds (None: none)."""
        if self.time_budget_s is None:
            return 3 * 60.0 if self.quick else 15 * 60.0
        return float(self.time_budget_s) or None

    @property
    def user_set(self) -> frozenset[str]:
        """The parts of the layout the user set, which the time budget never cuts (harness.loop.budget names)."""
        return frozenset(k for k, v in (("windows", self.stage_windows), ("bursts", self.capacity_requests),
                                        ("points", self.point_duration_s), ("rates", self.rate_fractions),
                                        ("repeats", self.repeats)) if v is not None)


def _int_in(flag: str, v: object, lo: int, hi: int, why: str = "") -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
        raise HarnessError(f"{flag} must be an integer from {lo} to {hi}{why}, got {v!r}.")


def check_mixes(mixes: tuple[tuple[int, int], ...]) -> None:
    if not mixes or any(len(m) != 2 or any(isinstance(x, bool) or not isinstance(x, int) or x < 2 for x in m) for m in mixes):
        raise HarnessError(f"--mixes must be INPUT/OUTPUT token pairs of integers >= 2 such as 512/64,128/256, got {mixes!r}.")


def check_rates(rates: tuple[float, ...]) -> None:
    if not rates or any(isinstance(f, bool) or not (isinstance(f, (int, float)) and 0 < f <= 5) for f in rates):
        raise HarnessError(f"--rates must be fractions of the predicted capacity in (0, 5] such as 0.2,0.5,0.8,1.2, got {rates!r}.")


def check_point_duration(d: float | None) -> None:
    if d is not None and not (isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) and 2 <= d <= 3600):
        raise HarnessError(f"--point-duration-s must be in [2, 3600] seconds, got {d!r}.")


@dataclass(frozen=True)
class LoopPlan:
    """The layout the loop runs, resolved from the options for this engine (`plan_for`) and cut by the time budget."""

    shape: StageShape
    batches: tuple[int, ...]
    reps: int
    quick: bool
    stages: bool
    served: bool
    mixes: tuple[tuple[int, int], ...]
    rate_fractions: tuple[float, ...]
    point_duration_s: float
    capacity_requests: int
    repeats: int
    stage_windows: int
    copy_cases: bool
    seed: int = 0  # the seeded workloads' (arrivals and prompts; the twin replays the same)
    lean_windows: bool = False  # every window at one rep fewer (the pre-window budget cut, harness.loop.budget)
    repeated_fractions: tuple[float, ...] | None = None  # None: every point and burst `repeats` times; else these rates only

    def repeats_of(self, fraction: float | None) -> int:
        """How many times a rate point at `fraction` of capacity (None: a capacity burst) is measured."""
        return repeats_of(self.repeats, self.repeated_fractions, fraction)

    @property
    def n_windows(self) -> int:
        """Stage windows to measure: one without both stages and served points (nothing to put between)."""
        return self.stage_windows if (self.stages and self.served) else 1

    @property
    def side_reps(self) -> int:
        """Reps of a stage window's side measurements (the prompts at the mixes' other lengths, the prompts beside
        decodes with their alone pairs, the prompt-cache copy cases): SIDE_REPS, 1 with --quick or lean windows."""
        return 1 if (self.quick or self.lean_windows) else SIDE_REPS

    def window_reps(self, window: int) -> int:
        """Reps of a stage window's prefill and decodes: `reps` in window 1 (it plans the points and gives the isolated-
        stage table), one fewer (at least 2) in later windows and in every lean window."""
        return self.reps if (window == 0 and not self.lean_windows) or self.reps < 3 else self.reps - 1

    @property
    def default_rate_points(self) -> int:
        return len(self.mixes) * len(self.rate_fractions)


def plan_for(opts: LoopOptions, slots: int) -> LoopPlan:
    """The defaults of every unset option for an engine with `slots` slots."""
    n_windows = opts.stage_windows if opts.stage_windows is not None else (1 if opts.quick else DEFAULT_STAGE_WINDOWS)
    burst = opts.capacity_requests if opts.capacity_requests is not None else (0 if opts.quick else max(10, CAPACITY_BURST_PER_SLOT * slots))
    return LoopPlan(
        shape=opts.shape, batches=opts.batches or tuple(range(1, slots + 1)),
        reps=opts.reps if opts.reps is not None else (QUICK_REPS if opts.quick else DEFAULT_REPS), quick=opts.quick,
        stages=opts.stages, served=opts.served, mixes=opts.mixes or DEFAULT_MIXES,
        rate_fractions=opts.rate_fractions or DEFAULT_RATE_FRACTIONS,
        point_duration_s=float(opts.point_duration_s or (QUICK_POINT_S if opts.quick else FULL_POINT_S)),
        capacity_requests=burst, repeats=opts.repeats if opts.repeats is not None else DEFAULT_REPEATS,
        stage_windows=n_windows, copy_cases=(not opts.quick) if opts.copy_cases is None else bool(opts.copy_cases), seed=opts.seed)



__all__ = ["DEFAULT_MIXES", "DEFAULT_RATE_FRACTIONS", "GpuTelemetryOptions", "LoopOptions", "LoopPlan", "plan_for"]
