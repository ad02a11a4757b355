"""Local NVML read as per-GPU load-time samples (harness.telemetry.gpu_sample): the calls harness.telemetry.nvml's
sampler makes for clocks, power, temperatures and clock-event reasons, plus utilization and device memory.

Calls: nvmlDeviceGetUtilizationRates(h).gpu (%, over the driver's last sample period), nvmlDeviceGetClockInfo
(SM, memory; MHz), nvmlDeviceGetPowerUsage (mW), nvmlDeviceGetMemoryInfo (.used, .total; bytes),
nvmlDeviceGetTemperature (GPU, C), NVML_FI_DEV_MEMORY_TEMP (HBM, C, where reported), and the clock-event reasons
(nvmlDeviceGetCurrentClocksEventReasons, or the older ...ThrottleReasons). A call the board does not support leaves
its field empty; a GPU whose every call fails gives an error row.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.telemetry.gpu_sample import GpuSample
from harness.telemetry.nvml import FI_DEV_MEMORY_TEMP, field_values


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: the field stays empty
        return None


def read_gpu(nv: Any, index: int, *, t_s: float, host: str) -> GpuSample:
    """One sample of NVML GPU `index` (pynvml, or any object with its calls)."""
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:  # noqa: BLE001
        return GpuSample(t_s=t_s, source="nvml", role="all", endpoint="local", host=host, gpu=str(index),
                         error=f"{type(exc).__name__}: {exc}"[:300])
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons")
    util = _try(lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
    mem = _try(lambda: nv.nvmlDeviceGetMemoryInfo(h))
    sm = _try(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    mc = _try(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
    power = _try(lambda: nv.nvmlDeviceGetPowerUsage(h))
    temp = _try(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
    reasons = _try(lambda: reasons_fn(h))
    (mem_temp,) = field_values(nv, h, (FI_DEV_MEMORY_TEMP,))
    values = (util, mem, sm, mc, power, temp, reasons)
    if all(v is None for v in values):
        return GpuSample(t_s=t_s, source="nvml", role="all", endpoint="local", host=host, gpu=str(index),
                         error="every NVML call failed for this GPU")
    return GpuSample(
        t_s=t_s, source="nvml", role="all", endpoint="local", host=host, gpu=str(index),
        uuid=_try(lambda: _text(nv.nvmlDeviceGetUUID(h))), model_name=_try(lambda: _text(nv.nvmlDeviceGetName(h))),
        util_frac=None if util is None else util / 100.0,
        sm_clock_hz=None if sm is None else sm * 1e6, mem_clock_hz=None if mc is None else mc * 1e6,
        power_w=None if power is None else power / 1e3,
        memory_used_bytes=None if mem is None else float(mem.used), memory_total_bytes=None if mem is None else float(mem.total),
        temperature_c=None if temp is None else float(temp), memory_temperature_c=mem_temp,
        throttle_reasons=None if reasons is None else int(reasons),
    )
