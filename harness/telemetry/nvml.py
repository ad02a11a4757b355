"""NVML sampler: SM/memory clocks, power, temperature and clock-event reasons every ~100 ms during a GPU run.

A run is flagged when any busy sample shows thermal or power throttling (clock-event reason bits
SW/HW thermal slowdown, SW power cap, HW power brake, HW slowdown) or when the SM clock of busy
samples drops more than 10 % below the highest busy clock seen (idle samples, reason bit GpuIdle,
are left out: an idle GPU drops its clock by design). Without NVML (no driver, no GPU) every
call degrades to nothing and `status()` gives the one line the manifest carries.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

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


@dataclass(frozen=True, slots=True)
class NvmlSample:
    t_s: float  # seconds since the sampler started
    gpu_index: int
    sm_clock_hz: float
    mem_clock_hz: float
    power_w: float
    temperature_c: float
    clock_event_reasons: int

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


def throttle_verdict(samples: list[NvmlSample], max_drop: float = SM_CLOCK_DROP_LIMIT) -> ThrottleVerdict:
    """Pure: did these samples throttle? (thermal, power, HW slowdown bits, or SM clock drop > max_drop)."""
    busy = [s for s in samples if not s.clock_event_reasons & GPU_IDLE]
    thermal = any(s.clock_event_reasons & THERMAL_BITS for s in busy)
    power = any(s.clock_event_reasons & POWER_BITS for s in busy)
    hw = any(s.clock_event_reasons & HW_SLOWDOWN for s in busy)
    drop = None
    reasons: list[str] = []
    if busy:
        clocks = [s.sm_clock_hz for s in busy if s.sm_clock_hz > 0]
        if clocks:
            drop = 1.0 - min(clocks) / max(clocks)
            if drop > max_drop:
                reasons.append(f"SM clock dropped {drop:.0%} (from {max(clocks) / 1e6:.0f} to {min(clocks) / 1e6:.0f} MHz) while busy; limit {max_drop:.0%}")
    if thermal:
        reasons.append("thermal slowdown reported by NVML")
    if power:
        reasons.append("power cap or power brake reported by NVML")
    if hw:
        reasons.append("hardware slowdown reported by NVML")
    return ThrottleVerdict(bool(reasons), thermal, power, hw, drop, len(busy), tuple(reasons))


def _nvml() -> tuple[Any | None, str]:
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
    mod, why = _nvml()
    return (mod is not None), (f"NVML sampling on: {why}" if mod else f"NVML unavailable: {why}")


def gpu_facts() -> dict[str, Any]:
    """Driver, names and max/current clocks of every GPU, from NVML; {} without it."""
    nv, _ = _nvml()
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


class NvmlSampler:
    """Background thread sampling every GPU each `period_s`; a no-op where NVML is unavailable."""

    def __init__(self, period_s: float = 0.1):
        self.period_s = period_s
        self.samples: list[NvmlSample] = []
        self._nv, self.note = _nvml()
        self.available = self._nv is not None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self, t0: float) -> None:
        nv = self._nv
        get_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            self.samples.append(NvmlSample(
                time.perf_counter() - t0, i,
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM) * 1e6,
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM) * 1e6,
                nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                int(get_reasons(h)),
            ))

    def _loop(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.is_set():
            try:
                self._read(t0)
            except Exception as exc:  # noqa: BLE001 - keep the run going; say why sampling stopped
                self.note = f"NVML sampling stopped: {type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.period_s)

    def start(self) -> "NvmlSampler":
        if self.available and self._thread is None:
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
