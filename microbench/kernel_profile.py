"""Per-kernel breakdown of one step (torch.profiler / kineto), stored with the run as table `micro_kernels`.

GPU: the step runs `steps` times under the profiler with CUDA activity, launched eagerly (the same
kernels a graph replay runs; the case's timing is the replay's); every kernel event (device_type CUDA, CUPTI's own timing) is grouped by kernel
name: calls per step, device seconds per step, share of the step's summed kernel time. The sum of
kernel times is not the step time: gaps between kernels (launch latency, host stalls) are the
difference, recorded as `kernel_sum_over_step`. CPU: there are no kernels; the same table holds the
aten operators' self CPU time (labelled `what = "cpu-op self time"`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

TOP_KERNELS = 40


@dataclass(frozen=True, slots=True)
class KernelRow:
    rank: int
    kernel: str
    calls_per_step: float
    time_per_step_s: float
    share: float  # of the summed kernel (or op) time
    what: str  # "cuda-kernel device time" | "cpu-op self time"


def aggregate(events: Iterable[tuple[str, float]], steps: int, what: str, top: int = TOP_KERNELS) -> list[KernelRow]:
    """(name, seconds) events of `steps` steps -> rows sorted by time, the tail beyond `top` summed into one row."""
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for name, sec in events:
        calls[name] += 1
        total[name] += sec
    grand = sum(total.values())
    order = sorted(total, key=lambda n: -total[n])
    rows = [KernelRow(i + 1, n, calls[n] / steps, total[n] / steps, total[n] / grand if grand else 0.0, what)
            for i, n in enumerate(order[:top])]
    rest = order[top:]
    if rest:
        t = sum(total[n] for n in rest)
        rows.append(KernelRow(top + 1, f"({len(rest)} other kernels)", sum(calls[n] for n in rest) / steps, t / steps,
                              t / grand if grand else 0.0, what))
    return rows


def profile_step(b: Any, fn: Callable[[], Any], steps: int = 3) -> list[KernelRow]:
    """Run `fn` `steps` times under torch.profiler and break its time down by kernel (GPU) or operator (CPU)."""
    torch = b.module
    # lazy: optional (the torch extra): a host without it runs the numpy suites
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if b.is_cuda else [])
    fn()
    b.sync()
    with profile(activities=acts) as prof:
        for _ in range(steps):
            fn()
        b.sync()
    if b.is_cuda:
        # lazy: optional (the torch extra): a host without it runs the numpy suites
        from torch.autograd import DeviceType

        evs = [(e.name, e.time_range.elapsed_us() / 1e6) for e in prof.events()  # a kernel's own span, microseconds
               if getattr(e, "device_type", None) == DeviceType.CUDA]
        return aggregate(evs, steps, "cuda-kernel device time")
    evs = [(k.key, k.self_cpu_time_total / 1e6 / k.count) for k in prof.key_averages() for _ in range(k.count)
           if k.key.startswith("aten::")]
    del torch
    return aggregate(evs, steps, "cpu-op self time")


def table_rows(case_id: str, rows: list[KernelRow], step_s: float) -> list[dict[str, Any]]:
    kernel_sum = sum(r.time_per_step_s for r in rows)
    return [{"case_id": case_id, **asdict(r), "step_s": step_s, "kernel_sum_over_step": kernel_sum / step_s if step_s > 0 else float("nan")}
            for r in rows]
