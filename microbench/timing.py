"""The one timing core every microbenchmark shares: warm-up, budget-sized repetitions, raw samples, spread.

Discipline (the tool library's device METHOD.md; pyperf; triton.testing.do_bench):
- warm up until `warmup_s` has passed (and at least `min_warmup` calls), so module load,
  allocation and JIT stay out of the numbers; the warm-up also estimates one call's time;
- a call shorter than `target_sample_s` is repeated `inner_reps` times per sample (CPU), or
  captured `inner_reps` times into a CUDA graph that is replayed (GPU), so the timer's own cost
  and the launch gaps do not dominate; every sample is divided by `inner_reps`;
- repetitions are sized by the time budget: `budget_s / (call_s × inner_reps)`, clamped to
  [min_reps, max_reps];
- a `flush` callable (an L2-sized write on the GPU) runs before each sample, outside the timed
  region; rotating input sets are the caller's job (see `rotation_sets`);
- CPU: `time.perf_counter_ns` around the region; GPU: `torch.cuda.Event`s recorded on the
  stream around the region, read after one synchronize at the end;
- all raw samples are kept; median, p10/p90, mean, min, CV are reported; CV above
  `cv_threshold` marks the case unstable, with a remedy, when the central spread agrees
  ((p90 − p10) / median above the same threshold): a few preempted samples on a shared machine
  inflate the CV while the median stays sound, and the CV is still reported.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from harness.errors import HarnessError


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    budget_s: float = 1.0  # time spent in timed samples per case
    warmup_s: float = 0.1
    min_warmup: int = 2
    min_reps: int = 5
    max_reps: int = 2000
    target_sample_s: float = 1e-3  # shorter calls are grouped (CPU loop, or CUDA graph) to reach this
    max_inner_reps: int = 10_000
    cv_threshold: float = 0.10
    graph_below_s: float = 50e-6  # GPU: calls shorter than this are replayed from a CUDA graph

    def __post_init__(self) -> None:
        for f in ("budget_s", "warmup_s", "target_sample_s", "cv_threshold", "graph_below_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise HarnessError(f"timing policy: {f} must be a finite number >= 0, got {v!r}.")
        if self.budget_s <= 0:
            raise HarnessError(f"timing policy: budget_s must be > 0, got {self.budget_s!r}; give --budget-s a positive number of seconds.")
        for f in ("min_warmup", "min_reps", "max_reps", "max_inner_reps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"timing policy: {f} must be an integer >= 1, got {v!r}.")
        if self.max_reps < self.min_reps:
            raise HarnessError(f"timing policy: max_reps ({self.max_reps}) is below min_reps ({self.min_reps}).")


FULL = TimingPolicy()
QUICK = TimingPolicy(budget_s=0.15, warmup_s=0.02, min_warmup=2, min_reps=3, max_reps=200, target_sample_s=2e-4)


@dataclass(frozen=True, slots=True)
class SampleStats:
    n: int
    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    min_s: float
    max_s: float
    cv: float  # stdev / mean (population stdev)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an already sorted list; q in [0, 100]."""
    if not sorted_values:
        raise HarnessError("percentile of no samples; a case must record at least one sample.")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(times_s: list[float] | tuple[float, ...]) -> SampleStats:
    """Median, p10/p90, mean, extremes and coefficient of variation of raw samples (seconds)."""
    xs = sorted(float(t) for t in times_s)
    if not xs:
        raise HarnessError("no samples to summarize; the timing loop ran zero repetitions.")
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / n
    cv = math.sqrt(var) / mean if mean > 0 else 0.0
    return SampleStats(n, percentile(xs, 50), percentile(xs, 10), percentile(xs, 90), mean, xs[0], xs[-1], cv)


@dataclass(frozen=True, slots=True)
class Measurement:
    times_s: tuple[float, ...]  # raw samples, each already divided by inner_reps
    inner_reps: int
    timer: str  # "perf_counter_ns" | "cuda-events" | "cuda-graph+events" | "external"
    stats: SampleStats
    unstable: bool
    remedy: str | None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "timer": self.timer, "inner_reps": self.inner_reps, "stats": self.stats.to_dict(),
            "unstable": self.unstable, "remedy": self.remedy, "notes": list(self.notes),
        }


def stability(stats: SampleStats, policy: TimingPolicy) -> tuple[bool, str | None]:
    """pyperf-style verdict: a CV and a p10–p90 spread both above the threshold is unstable; the message says what to do."""
    spread = (stats.p90_s - stats.p10_s) / stats.median_s if stats.median_s > 0 else 0.0
    if stats.cv <= policy.cv_threshold or spread <= policy.cv_threshold:
        return False, None
    msg = (
        f"the standard deviation is {stats.cv:.0%} of the mean and p10–p90 spans {spread:.0%} of the median "
        f"(threshold {policy.cv_threshold:.0%}, {stats.n} samples); "
        "rerun with a larger --budget-s, on an idle machine (other processes share the CPUs), "
        "and check the telemetry for throttling"
    )
    if stats.n < 10:
        msg += f"; only {stats.n} samples were taken: raise the budget so more fit"
    return True, msg


def measurement_from_samples(times_s: list[float], inner_reps: int, timer: str, policy: TimingPolicy, notes: tuple[str, ...] = ()) -> Measurement:
    stats = summarize(times_s)
    unstable, remedy = stability(stats, policy)
    return Measurement(tuple(times_s), inner_reps, timer, stats, unstable, remedy, notes)


def plan_reps(call_s: float, policy: TimingPolicy) -> tuple[int, int]:
    """(inner_reps, samples) for a call of `call_s` under `policy`; pure, so it is tested directly."""
    call_s = max(call_s, 1e-9)
    inner = 1 if call_s >= policy.target_sample_s else min(policy.max_inner_reps, math.ceil(round(policy.target_sample_s / call_s, 9)))
    reps = int(round(policy.budget_s / (call_s * inner), 9))  # round(): 1e-3/1e-6 is 1000.0000000000001 in binary
    return inner, max(policy.min_reps, min(policy.max_reps, reps))


def _warmup_cpu(fn: Callable[[], Any], policy: TimingPolicy) -> float:
    times = []
    start = time.perf_counter_ns()
    while len(times) < policy.min_warmup or (time.perf_counter_ns() - start) < policy.warmup_s * 1e9:
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
        if len(times) >= 10_000:
            break
    times.sort()
    return times[len(times) // 2] / 1e9


def time_cpu(fn: Callable[[], Any], policy: TimingPolicy = FULL, *, flush: Callable[[], Any] | None = None,
             sync: Callable[[], Any] | None = None) -> Measurement:
    """Time `fn` on the host clock. `sync` (if given) runs inside the timed region after the calls,
    for work that completes asynchronously; `flush` runs before each sample, outside it."""

    def call() -> None:
        fn()
        if sync is not None:
            sync()

    call_s = _warmup_cpu(call, policy)
    inner, reps = plan_reps(call_s, policy)
    samples: list[float] = []
    deadline = time.perf_counter_ns() + int(3 * policy.budget_s * 1e9)
    for i in range(reps):
        if flush is not None:
            flush()
        t0 = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        if sync is not None:
            sync()
        samples.append((time.perf_counter_ns() - t0) / 1e9 / inner)
        if i + 1 >= policy.min_reps and time.perf_counter_ns() > deadline:
            break  # a loaded machine made calls slower than the warm-up said; keep the budget
    return measurement_from_samples(samples, inner, "perf_counter_ns", policy)


def capture_graph(torch: Any, fn: Callable[[], Any], calls: int = 1) -> Any:
    """Warm `fn` up on a side stream (three calls), then capture `calls` calls of it into a new CUDA graph."""
    cuda = torch.cuda
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for _ in range(3):
            fn()
    cuda.current_stream().wait_stream(side)
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def time_cuda(fn: Callable[[], Any], torch: Any, policy: TimingPolicy = FULL, *, flush: Callable[[], Any] | None = None,
              allow_graph: bool = True) -> Measurement:
    """Time `fn` with CUDA events on the current stream; tiny calls are replayed from a CUDA graph."""
    cuda = torch.cuda
    cuda.synchronize()
    start = time.perf_counter()
    est: list[float] = []
    while len(est) < policy.min_warmup or time.perf_counter() - start < policy.warmup_s:
        a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        est.append(a.elapsed_time(b) / 1e3)
        if len(est) >= 10_000:
            break
    est.sort()
    call_s = est[len(est) // 2]
    inner, reps = plan_reps(call_s, policy)
    notes: list[str] = []
    graph = None
    timer = "cuda-events"
    if allow_graph and call_s < policy.graph_below_s:
        try:
            graph = capture_graph(torch, fn, inner)
            graph.replay()
            cuda.synchronize()
            timer = "cuda-graph+events"
        except Exception as exc:  # noqa: BLE001 - some ops cannot be captured; time them plainly
            graph = None
            notes.append(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); timed with plain launches")
            cuda.synchronize()
    events = []
    for _ in range(reps):
        if flush is not None:
            flush()
        a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        a.record()
        if graph is not None:
            graph.replay()
        else:
            for _ in range(inner):
                fn()
        b.record()
        events.append((a, b))
    cuda.synchronize()
    samples = [a.elapsed_time(b) / 1e3 / inner for a, b in events]
    return measurement_from_samples(samples, inner, timer, policy, tuple(notes))


def rotation_sets(working_set_bytes: float, cache_bytes: float | None, *, max_sets: int = 8,
                  memory_cap_bytes: float = 2 * 1024**3) -> int:
    """How many independent input sets to rotate through so a repeat does not find its inputs in cache:
    enough that the sets together exceed twice the cache, at most `max_sets` and `memory_cap_bytes`."""
    if working_set_bytes <= 0 or not cache_bytes:
        return 1
    need = math.ceil(2 * cache_bytes / working_set_bytes)
    cap = max(1, int(memory_cap_bytes // working_set_bytes))
    return max(1, min(need, max_sets, cap))


def cache_state(working_set_bytes: float, sets: int, cache_bytes: float | None, cache_name: str) -> str:
    """One line saying whether repeats could hit the cache."""
    if not cache_bytes:
        return f"{cache_name} size unknown; repeats may hit a cache"
    total = working_set_bytes * sets
    if total >= 2 * cache_bytes:
        return f"cold: {sets} rotating set(s) of {working_set_bytes / 2**20:.3g} MiB exceed 2× {cache_name} ({cache_bytes / 2**20:.3g} MiB)"
    return f"warm: {sets} set(s) of {working_set_bytes / 2**20:.3g} MiB fit within 2× {cache_name} ({cache_bytes / 2**20:.3g} MiB)"
