"""NVML sampler: SM/memory clocks, power, GPU and HBM temperature and clock-event reasons every ~100 ms.

Only the GPUs a run uses are sampled (`NvmlSampler(gpu_indices=...)`; `nvml_indices_for_cuda`
maps torch's cuda:N, which CUDA_VISIBLE_DEVICES renumbers, to NVML's index by PCI bus id).
Power: `nvmlDeviceGetPowerUsage` is, on Hopper and later, the average over the last second
(POWER_NOTE), so a 100 ms sample lags short cases; the instantaneous field
(NVML_FI_DEV_POWER_INSTANT) is recorded too where the driver has it. HBM temperature comes from
NVML_FI_DEV_MEMORY_TEMP (None where the board does not report it).

A sample is throttled when it is busy and shows thermal or power throttling (clock-event reason
bits SW/HW thermal slowdown, SW power cap, HW power brake, HW slowdown) or its SM clock is more
than 10 % below the highest busy clock seen (idle samples, reason bit GpuIdle, are left out: an
idle GPU drops its clock by design). Verdicts are tied to cases: the runner marks each case's
time window (`with sampler.window(case)`) and `verdicts_by_case` judges each case on the samples
that overlap it, so a throttled case is named rather than the whole run. Without NVML (no driver,
no GPU) every call degrades to nothing and `status()` gives the one line the manifest carries.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

# NVML clock-event reason bits (nvml.h: nvmlClocksEventReason*)
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
THERMAL_BITS = SW_THERMAL | HW_THERMAL
POWER_BITS = SW_POWER_CAP | HW_POWER_BRAKE
SM_CLOCK_DROP_LIMIT = 0.10
# nvml.h field ids (nvmlDeviceGetFieldValues)
FI_DEV_MEMORY_TEMP = 82
FI_DEV_POWER_INSTANT = 186
POWER_NOTE = ("power_w is nvmlDeviceGetPowerUsage: on Hopper and later GPUs the average over the last 1 s, so it lags "
              "cases shorter than that; power_instant_w is NVML_FI_DEV_POWER_INSTANT where the driver reports it")


@dataclass(frozen=True, slots=True)
class NvmlSample:
    t_s: float  # seconds since the sampler started
    gpu_index: int
    sm_clock_hz: float
    mem_clock_hz: float
    power_w: float  # 1-s average on Hopper and later (POWER_NOTE)
    temperature_c: float  # GPU die
    clock_event_reasons: int
    memory_temperature_c: float | None = None  # HBM, where reported
    power_instant_w: float | None = None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ThrottleVerdict:
    throttled: bool
    thermal: bool
    power: bool
    hw_slowdown: bool
    sm_clock_drop: float | None  # 1 - min/max of busy SM clocks
    busy_samples: int
    reasons: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


def throttle_verdict(samples: list[NvmlSample], max_drop: float = SM_CLOCK_DROP_LIMIT,
                     reference_clock_hz: float | None = None) -> ThrottleVerdict:
    """Pure: did these samples throttle? (thermal, power, HW slowdown bits, or SM clock drop > max_drop below
    the highest busy clock, of these samples or `reference_clock_hz` when higher)."""
    busy = [s for s in samples if not s.clock_event_reasons & GPU_IDLE]
    thermal = any(s.clock_event_reasons & THERMAL_BITS for s in busy)
    power = any(s.clock_event_reasons & POWER_BITS for s in busy)
    hw = any(s.clock_event_reasons & HW_SLOWDOWN for s in busy)
    drop = None
    reasons: list[str] = []
    if busy:
        clocks = [s.sm_clock_hz for s in busy if s.sm_clock_hz > 0]
        if clocks:
            top = max(max(clocks), reference_clock_hz or 0.0)
            drop = 1.0 - min(clocks) / top
            if drop > max_drop:
                reasons.append(f"SM clock dropped {drop:.0%} (from {top / 1e6:.0f} to {min(clocks) / 1e6:.0f} MHz) while busy; limit {max_drop:.0%}")
    if thermal:
        reasons.append("thermal slowdown reported by NVML")
    if power:
        reasons.append("power cap or power brake reported by NVML")
    if hw:
        reasons.append("hardware slowdown reported by NVML")
    return ThrottleVerdict(bool(reasons), thermal, power, hw, drop, len(busy), tuple(reasons))


@dataclass(frozen=True, slots=True)
class CaseWindow:
    """When one case ran, on the sampler's clock (seconds since it started)."""

    case: str
    start_s: float
    end_s: float


def overlapping(samples: list[NvmlSample], w: CaseWindow, period_s: float = 0.1) -> list[NvmlSample]:
    """Samples taken while the case ran, or within one period after it (a sample reports the period it ends)."""
    return [s for s in samples if w.start_s <= s.t_s <= w.end_s + period_s]


def verdicts_by_case(samples: list[NvmlSample], windows: list[CaseWindow], period_s: float = 0.1,
                     max_drop: float = SM_CLOCK_DROP_LIMIT) -> dict[str, ThrottleVerdict]:
    """Pure: one verdict per case, from the samples that overlap its window. The SM clock drop is judged
    against the highest busy clock of the whole run, so a case run at a throttled clock is caught even when
    its own samples are steady."""
    busy_max = max((s.sm_clock_hz for s in samples if not s.clock_event_reasons & GPU_IDLE and s.sm_clock_hz > 0),
                   default=None)
    out: dict[str, ThrottleVerdict] = {}
    for w in windows:
        got = overlapping(samples, w, period_s)
        if not got:
            continue
        v = throttle_verdict(got, max_drop, reference_clock_hz=busy_max)
        prev = out.get(w.case)
        out[w.case] = v if prev is None or not prev.throttled else prev
    return out


def open_nvml() -> tuple[Any | None, str]:
    try:
        import pynvml
    except ImportError as exc:
        return None, f"nvidia-ml-py not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError subclasses: no library, no driver
        return None, f"{type(exc).__name__}: {exc}"
    try:
        n = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"
    if n == 0:
        return None, "NVML found no GPU"
    return pynvml, f"{n} GPU(s)"


def status() -> tuple[bool, str]:
    """(available, one line for the manifest)."""
    mod, why = open_nvml()
    return (mod is not None), (f"NVML sampling on: {why}" if mod else f"NVML unavailable: {why}")


def gpu_facts() -> dict[str, Any]:
    """Driver, names and max/current clocks of every GPU, from NVML; {} without it."""
    nv, _ = open_nvml()
    if nv is None:
        return {}
    out: dict[str, Any] = {"driver": _s(nv.nvmlSystemGetDriverVersion()), "gpus": []}
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        g = {"index": i, "name": _s(nv.nvmlDeviceGetName(h))}
        for key, fn, arg in (
            ("sm_clock_max_hz", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM),
            ("mem_clock_max_hz", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_MEM),
            ("sm_clock_now_hz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
            ("mem_clock_now_hz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
        ):
            try:
                g[key] = fn(h, arg) * 1e6
            except Exception:  # noqa: BLE001 - some fields are not supported on every board
                g[key] = None
        try:
            g["power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3
        except Exception:  # noqa: BLE001
            g["power_limit_w"] = None
        out["gpus"].append(g)
    return out


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def nvml_indices_for_cuda(cuda_devices: list[str], nv: Any | None = None) -> list[int]:
    """NVML indices of torch devices ("cuda:0", ...) matched by PCI bus id (CUDA_VISIBLE_DEVICES renumbers torch's);
    [] where NVML or torch cannot say. CPU devices are ignored."""
    if nv is None:
        nv, _ = open_nvml()
    if nv is None:
        return []
    try:
        import torch
    except ImportError:
        return []
    out: list[int] = []
    for d in cuda_devices:
        if not str(d).startswith("cuda"):
            continue
        idx = int(str(d).partition(":")[2] or 0)
        try:
            p = torch.cuda.get_device_properties(idx)
            bus = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
            h = nv.nvmlDeviceGetHandleByPciBusId(bus)
            out.append(int(nv.nvmlDeviceGetIndex(h)))
        except Exception:  # noqa: BLE001 - an old torch without PCI ids, or NVML refusing: fall back to torch's index
            out.append(idx)
    return sorted(set(out))


def field_values(nv: Any, h: Any, ids: tuple[int, ...]) -> list[float | None]:
    """nvmlDeviceGetFieldValues for `ids`, None for each one the board does not report."""
    try:
        vals = nv.nvmlDeviceGetFieldValues(h, list(ids))
    except Exception:  # noqa: BLE001 - not supported on this driver or board
        return [None] * len(ids)
    out: list[float | None] = []
    for v in vals:
        if getattr(v, "nvmlReturn", 1) != 0:
            out.append(None)
            continue
        kind = getattr(v, "valueType", 1)
        u = v.value
        out.append(float(getattr(u, {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}.get(kind, "uiVal"))))
    return out


class NvmlSampler:
    """Background thread sampling the run's GPUs each `period_s` (all of them when `gpu_indices` is None);
    a no-op where NVML is unavailable. `window(case)` marks when a case ran, for per-case verdicts."""

    def __init__(self, period_s: float = 0.1, gpu_indices: list[int] | None = None, nv: Any | None = None):
        self.period_s = period_s
        self.samples: list[NvmlSample] = []
        self.windows: list[CaseWindow] = []
        self._nv, self.note = (nv, "injected NVML") if nv is not None else open_nvml()
        self.available = self._nv is not None
        self.gpu_indices = None if gpu_indices is None else sorted(set(gpu_indices))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.perf_counter()

    def _indices(self) -> list[int]:
        return self.gpu_indices if self.gpu_indices is not None else list(range(self._nv.nvmlDeviceGetCount()))

    def _read(self, t0: float) -> None:
        nv = self._nv
        get_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        for i in self._indices():
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem_temp, p_inst = field_values(nv, h, (FI_DEV_MEMORY_TEMP, FI_DEV_POWER_INSTANT))
            self.samples.append(NvmlSample(
                time.perf_counter() - t0, i,
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) * 1e6,
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM) * 1e6,
                nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                int(get_reasons(h)),
                mem_temp,
                None if p_inst is None else p_inst / 1e3,
            ))

    def sample_once(self) -> None:
        """Take one sample now (tests, and a last sample at the end of a case)."""
        if self.available:
            self._read(self._t0)

    @contextlib.contextmanager
    def window(self, case: str) -> Iterator[None]:
        """Mark the time `case` runs (kept even when the case raises)."""
        start = time.perf_counter() - self._t0
        try:
            yield
        finally:
            self.windows.append(CaseWindow(case, start, time.perf_counter() - self._t0))

    def case_verdicts(self) -> dict[str, ThrottleVerdict]:
        return verdicts_by_case(self.samples, self.windows, self.period_s)

    def _loop(self) -> None:
        t0 = self._t0
        while not self._stop.is_set():
            try:
                self._read(t0)
            except Exception as exc:  # noqa: BLE001 - keep the run going; say why sampling stopped
                self.note = f"NVML sampling stopped: {type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.period_s)

    def start(self) -> "NvmlSampler":
        if self.available and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> list[NvmlSample]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        return self.samples

    def __enter__(self) -> "NvmlSampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def verdict(self) -> ThrottleVerdict | None:
        return throttle_verdict(self.samples) if self.samples else None
