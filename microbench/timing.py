"""The one timing core every microbenchmark shares: warm-up, budget-sized repetitions, raw samples, spread.

Discipline (the tool library's device METHOD.md; pyperf; triton.testing.do_bench):
- warm up until `warmup_s` has passed (and at least `min_warmup` calls), so module load,
  allocation and JIT stay out of the numbers; the warm-up also estimates one call's time;
  on a GPU the warm-up lasts at least `gpu_min_warmup_s` in bursts of ~10 ms of queued work and
  goes on (up to `max_warmup_s`) until the SM clock read through `clocks` has risen and settled:
  an idle H200 sits at 345 MHz and needs more than the CPU's 20 ms to reach ~1980 MHz;
- a call shorter than `target_sample_s` is repeated `inner_reps` times per sample (CPU), or
  captured `inner_reps` times into a CUDA graph that is replayed (GPU), so the timer's own cost
  and the launch gaps do not dominate; every sample is divided by `inner_reps`;
- repetitions are sized by the time budget: `budget_s / (call_s × inner_reps)`, clamped to
  [min_reps, max_reps];
- a `flush` callable (a write larger than the L2 on the GPU, as triton.testing.do_bench zeroes a
  256 MB buffer) runs before every timed call, outside the timed region; with a flush each sample
  is ONE call (grouping calls would leave all but the first warm); rotating input sets instead of
  a flush are the caller's job (see `rotation_sets`);
- CPU: `time.perf_counter_ns` around the region; GPU: `torch.cuda.Event`s recorded on the
  stream around the region; the host waits for sample i-2 before queueing sample i+1, so the
  queue stays shallow and the deadline (`deadline_s`, default warm-up cap + 3× budget + 10 s)
  is kept: sampling stops there, with a note, once `min_reps` are in;
- the SM and memory clocks (when `clocks` can read them) are recorded with every measurement;
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
    gpu_min_warmup_s: float = 0.3  # GPU: the least warm-up, whatever the clocks say
    max_warmup_s: float = 3.0  # GPU: warm-up ends here even if the clock never settled (noted)
    clock_settle: float = 0.03  # GPU: the last three SM clock readings within 3 % of each other and of the highest
    deadline_s: float = 0.0  # GPU: wall-clock limit of one timing; 0 = max_warmup_s + 3×budget_s + 10 s

    @property
    def effective_deadline_s(self) -> float:
        return self.deadline_s or (self.max_warmup_s + 3 * self.budget_s + 10.0)

    def __post_init__(self) -> None:
        for f in ("budget_s", "warmup_s", "target_sample_s", "cv_threshold", "graph_below_s", "gpu_min_warmup_s",
                  "max_warmup_s", "clock_settle", "deadline_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise HarnessError(f"timing policy: {f} must be a finite number >= 0, got {v!r}.")
        if self.budget_s <= 0:
            raise HarnessError(f"timing policy: budget_s must be > 0, got {self.budget_s!r}; give --budget-s a positive number of seconds.")
        for f in ("min_warmup", "min_reps", "max_reps", "max_inner_reps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"timing policy: {f} must be an integer >= 1, got {v!r}.")
        if self.max_warmup_s < max(self.warmup_s, self.gpu_min_warmup_s):
            raise HarnessError(f"timing policy: max_warmup_s ({self.max_warmup_s}) is below the minimum warm-up "
                               f"({max(self.warmup_s, self.gpu_min_warmup_s)}); raise max_warmup_s.")
        if self.max_reps < self.min_reps:
            raise HarnessError(f"timing policy: max_reps ({self.max_reps}) is below min_reps ({self.min_reps}).")


FULL = TimingPolicy()
QUICK = TimingPolicy(budget_s=0.15, warmup_s=0.02, min_warmup=2, min_reps=3, max_reps=200, target_sample_s=2e-4,
                     gpu_min_warmup_s=0.2, max_warmup_s=1.5)


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
    sm_clock_hz: float | None = None  # read at the end of sampling, while the last samples still ran (GPU)
    mem_clock_hz: float | None = None
    warmup_s: float | None = None  # wall time the warm-up took

    def to_dict(self) -> dict[str, Any]:
        return {
            "timer": self.timer, "inner_reps": self.inner_reps, "stats": self.stats.to_dict(),
            "unstable": self.unstable, "remedy": self.remedy, "notes": list(self.notes),
            "sm_clock_hz": self.sm_clock_hz, "mem_clock_hz": self.mem_clock_hz, "warmup_s": self.warmup_s,
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


def measurement_from_samples(times_s: list[float], inner_reps: int, timer: str, policy: TimingPolicy, notes: tuple[str, ...] = (),
                             *, sm_clock_hz: float | None = None, mem_clock_hz: float | None = None,
                             warmup_s: float | None = None) -> Measurement:
    stats = summarize(times_s)
    unstable, remedy = stability(stats, policy)
    return Measurement(tuple(times_s), inner_reps, timer, stats, unstable, remedy, notes, sm_clock_hz, mem_clock_hz, warmup_s)


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


def clocks_settled(sm_clocks_hz: list[float], tolerance: float) -> bool:
    """The last three SM clock readings agree within `tolerance` and sit within it of the highest seen."""
    if len(sm_clocks_hz) < 3:
        return False
    last = sm_clocks_hz[-3:]
    top = max(sm_clocks_hz)
    return top > 0 and (max(last) - min(last)) <= tolerance * top and min(last) >= (1 - tolerance) * top


def warmup_done(elapsed_s: float, calls: int, sm_clocks_hz: list[float], policy: TimingPolicy, *, gpu: bool,
                clocks_readable: bool) -> tuple[bool, str | None]:
    """Whether the warm-up may stop, and a note when it stopped without the clocks settling. Pure, tested directly."""
    if calls < policy.min_warmup:
        return False, None
    need = max(policy.warmup_s, policy.gpu_min_warmup_s) if gpu else policy.warmup_s
    if elapsed_s < need:
        return False, None
    if not gpu or not clocks_readable or clocks_settled(sm_clocks_hz, policy.clock_settle):
        return True, None
    if elapsed_s >= policy.max_warmup_s:
        seen = f"{min(sm_clocks_hz[-3:]) / 1e6:.0f}-{max(sm_clocks_hz[-3:]) / 1e6:.0f} MHz" if sm_clocks_hz else "no reading"
        return True, f"warm-up stopped at max_warmup_s={policy.max_warmup_s:g} s with the SM clock not settled (last readings {seen})"
    return False, None


def burst_size(call_s: float, burst_s: float = 0.01, cap: int = 1000) -> int:
    """Calls queued between two waits during a GPU warm-up: ~`burst_s` of work, so the GPU stays busy and clocks up."""
    return max(1, min(cap, math.ceil(burst_s / max(call_s, 1e-9))))


def time_cuda(fn: Callable[[], Any], torch: Any, policy: TimingPolicy = FULL, *, flush: Callable[[], Any] | None = None,
              allow_graph: bool = True, clocks: Any = None, deadline_s: float | None = None) -> Measurement:
    """Time `fn` with CUDA events on the current stream; tiny calls are replayed from a CUDA graph.

    `flush` (e.g. zeroing a buffer > 2x L2) runs before every timed call, so every sample is one cold
    call. `clocks` is an object with `read() -> (sm_clock_hz | None, mem_clock_hz | None)` (microbench.gpu_clocks);
    the warm-up waits for its SM clock to settle. `deadline_s` bounds the whole timing (warm-up and samples)."""
    cuda = torch.cuda
    t_start = time.perf_counter()
    deadline = t_start + (deadline_s if deadline_s is not None else policy.effective_deadline_s)
    notes: list[str] = []
    cuda.synchronize()
    est: list[float] = []
    sm_readings: list[float] = []
    readable = clocks is not None
    last_read = -1.0
    k = 1
    while True:
        pairs = []
        for _ in range(k):
            if flush is not None:
                flush()  # the estimate must be of the cold call that will be timed
            a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            pairs.append((a, b))
        pairs[-1][1].synchronize()
        est += [a.elapsed_time(b) / 1e3 for a, b in pairs]
        elapsed = time.perf_counter() - t_start
        if readable and elapsed - last_read >= 0.02:
            sm, _ = clocks.read()
            if sm is None:
                readable = False
            else:
                sm_readings.append(float(sm))
            last_read = elapsed
        done, why = warmup_done(elapsed, len(est), sm_readings, policy, gpu=True, clocks_readable=readable)
        if why:
            notes.append(why)
        if done:
            break
        if time.perf_counter() > deadline:
            notes.append(f"deadline of {deadline - t_start:.1f} s reached during the warm-up")
            break
        k = burst_size(sorted(est)[len(est) // 2], cap=100 if flush is not None else 1000)
    warmup_s = time.perf_counter() - t_start
    tail = sorted(est[len(est) // 2:])  # the second half: after the clocks rose
    call_s = tail[len(tail) // 2]
    inner, reps = plan_reps(call_s, policy)
    if flush is not None:
        inner = 1  # every timed call follows its own flush
        reps = max(policy.min_reps, min(policy.max_reps, int(round(policy.budget_s / max(call_s, 1e-9), 9))))
        notes.append("flush before every timed call (inputs cold in L2), one call per sample")
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
    events: list[tuple[Any, Any]] = []
    for i in range(reps):
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
        if i >= 2:
            events[i - 2][1].synchronize()  # keep at most ~2 samples queued: the deadline below is then real
        if len(events) >= policy.min_reps and time.perf_counter() > deadline:
            notes.append(f"deadline of {deadline - t_start:.1f} s reached: {len(events)} of {reps} planned samples taken")
            break
    sm_hz = mem_hz = None
    if clocks is not None:
        sm_hz, mem_hz = clocks.read()  # the last samples are still running
    cuda.synchronize()
    samples = [a.elapsed_time(b) / 1e3 / inner for a, b in events]
    return measurement_from_samples(samples, inner, timer, policy, tuple(notes), sm_clock_hz=sm_hz, mem_clock_hz=mem_hz,
                                    warmup_s=warmup_s)


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
