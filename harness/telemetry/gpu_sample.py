"""One GPU's state at one instant during a load run, from local NVML or a DCGM exporter: the row of table `gpu_metrics`.

Columns (base units; a field the source does not report is empty):
  t_s                   seconds since the run's t0 (the sampler's read, on the load host's CLOCK_MONOTONIC)
  source                "nvml" (this host) or "dcgm" (a dcgm-exporter /metrics)
  role                  "all", "prefill" or "decode" (the pool the endpoint serves; NVML: "all")
  endpoint              the exporter URL, or "local"
  host, gpu, uuid, model_name   where the GPU is: the exporter's hostname label (NVML: this host), its index, UUID, name
  util_frac             fraction of the last sample period a kernel ran (NVML utilization.gpu, DCGM_FI_DEV_GPU_UTIL / 100)
  sm_clock_hz, mem_clock_hz     current clocks
  power_w               board power draw (NVML: 1-s average on Hopper and later, see harness.telemetry.nvml.POWER_NOTE)
  memory_used_bytes, memory_total_bytes   device memory (DCGM: FB_USED, and FB_USED + FB_FREE + FB_RESERVED)
  temperature_c, memory_temperature_c     GPU die and HBM
  throttle_reasons      NVML clock-event reason bits (nvml.h nvmlClocksEventReason*; DCGM_FI_DEV_CLOCKS_EVENT_REASONS has
                        the same bits); empty when the source does not export them
  error                 why this source gave no sample at t_s (the other fields are then empty)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.telemetry.nvml import GPU_IDLE, HW_POWER_BRAKE, HW_SLOWDOWN, HW_THERMAL, SW_POWER_CAP, SW_THERMAL

TABLE = "gpu_metrics"
# pandas dtypes of the stored table: one declared schema for every part, whatever a part holds
COLUMN_DTYPES: dict[str, str] = {
    "t_s": "float64", "source": "string", "role": "string", "endpoint": "string", "host": "string", "gpu": "string",
    "uuid": "string", "model_name": "string", "util_frac": "float64", "sm_clock_hz": "float64", "mem_clock_hz": "float64",
    "power_w": "float64", "memory_used_bytes": "float64", "memory_total_bytes": "float64", "temperature_c": "float64",
    "memory_temperature_c": "float64", "throttle_reasons": "Int64", "error": "string",
}
# the bits that mean the clocks were held down for heat or power (idle and application-clock settings are not throttling)
THROTTLE_NAMES = {SW_POWER_CAP: "sw_power_cap", HW_SLOWDOWN: "hw_slowdown", SW_THERMAL: "sw_thermal",
                  HW_THERMAL: "hw_thermal", HW_POWER_BRAKE: "hw_power_brake"}
THROTTLE_BITS = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
IDLE_BIT = GPU_IDLE


@dataclass(frozen=True, slots=True)
class GpuSample:
    t_s: float
    source: str
    role: str
    endpoint: str
    host: str | None = None
    gpu: str | None = None
    uuid: str | None = None
    model_name: str | None = None
    util_frac: float | None = None
    sm_clock_hz: float | None = None
    mem_clock_hz: float | None = None
    power_w: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    throttle_reasons: int | None = None
    error: str | None = None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def throttle_names(bits: int | None) -> list[str]:
    """The heat or power reasons set in `bits` (NVML/DCGM clock-event bitmask)."""
    if bits is None:
        return []
    return [name for bit, name in THROTTLE_NAMES.items() if int(bits) & bit]


def samples_frame(samples: list[GpuSample]) -> Any:
    """The samples as a DataFrame with the table's declared dtypes (so every stored part has one schema)."""
    import pandas as pd

    df = pd.DataFrame([s.to_row() for s in samples], columns=list(COLUMN_DTYPES))
    return df.astype(COLUMN_DTYPES)
