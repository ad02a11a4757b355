"""A DCGM exporter's Prometheus /metrics read as per-GPU samples (harness.telemetry.gpu_sample).

Metric names and units are dcgm-exporter's (NVIDIA/dcgm-exporter `etc/default-counters.csv`), one line per GPU with
the labels `gpu` (index), `UUID` (older releases: `uuid`), `pci_bus_id`, `device`, `modelName` and `Hostname`
(newer releases: `hostname`):
  DCGM_FI_DEV_GPU_UTIL        %    -> util_frac (/ 100)
  DCGM_FI_DEV_SM_CLOCK        MHz  -> sm_clock_hz          DCGM_FI_DEV_MEM_CLOCK   MHz -> mem_clock_hz
  DCGM_FI_DEV_POWER_USAGE     W    -> power_w
  DCGM_FI_DEV_FB_USED         MiB  -> memory_used_bytes    (+ DCGM_FI_DEV_FB_FREE, DCGM_FI_DEV_FB_RESERVED -> memory_total_bytes)
  DCGM_FI_DEV_GPU_TEMP        C    -> temperature_c        DCGM_FI_DEV_MEMORY_TEMP C   -> memory_temperature_c
  DCGM_FI_DEV_CLOCKS_EVENT_REASONS (older name DCGM_FI_DEV_CLOCK_THROTTLE_REASONS): the clock-event bitmask ->
      throttle_reasons. It is not in the default counters file: add the line
      `DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Clock event reasons.` to the exporter's counters CSV to get it.
Other metrics are ignored. Parsing reuses harness.telemetry.prometheus.parse_text.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from harness.telemetry.gpu_sample import GpuSample
from harness.telemetry.prometheus import Sample, parse_text

MIB = 2**20
# DCGM field -> (GpuSample field, factor to base units)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_frac", 0.01),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_hz", 1e6),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_hz", 1e6),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP": ("memory_temperature_c", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),
}
_TOTAL_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")


def _gpu_key(s: Sample) -> tuple[str, str]:
    return s.labels.get("gpu", "?"), s.labels.get("UUID") or s.labels.get("uuid") or ""


def samples_from_text(text: str, *, t_s: float, role: str, endpoint: str) -> list[GpuSample]:
    """One GpuSample per GPU named in the exposition; [] when it holds no DCGM GPU metric."""
    by_gpu: dict[tuple[str, str], dict[str, Any]] = {}
    total: dict[tuple[str, str], dict[str, float]] = {}
    for s in parse_text(text):
        if not s.name.startswith("DCGM_FI_") or "gpu" not in s.labels:
            continue
        key = _gpu_key(s)
        d = by_gpu.setdefault(key, {"host": s.labels.get("Hostname") or s.labels.get("hostname"),
                                    "model_name": s.labels.get("modelName")})
        if s.name in FIELDS:
            field, factor = FIELDS[s.name]
            d[field] = int(s.value) if field == "throttle_reasons" else s.value * factor
        if s.name in _TOTAL_PARTS:
            total.setdefault(key, {})[s.name] = s.value * MIB
    out = []
    for (gpu, uuid), d in sorted(by_gpu.items(), key=lambda kv: (len(kv[0][0]), kv[0])):
        parts = total.get((gpu, uuid), {})
        if "DCGM_FI_DEV_FB_USED" in parts and "DCGM_FI_DEV_FB_FREE" in parts:  # used + free (+ reserved) is the whole
            d["memory_total_bytes"] = sum(parts.values())
        out.append(GpuSample(t_s=t_s, source="dcgm", role=role, endpoint=endpoint, gpu=gpu, uuid=uuid or None, **d))
    return out


def fetch_text(url: str, timeout_s: float = 2.0) -> str:
    """The exposition text at `url` (raises on any failure: the caller turns it into an error row)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - http(s) checked by the caller
        return r.read().decode("utf-8", "replace")


def scrape(url: str, *, t_s: float, role: str, timeout_s: float = 2.0) -> list[GpuSample]:
    """Samples of every GPU the exporter at `url` reports, or one error row (never an exception)."""
    try:
        text = fetch_text(url, timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure becomes a row, the run goes on
        return [GpuSample(t_s=t_s, source="dcgm", role=role, endpoint=url, error=f"{type(exc).__name__}: {exc}"[:300])]
    got = samples_from_text(text, t_s=t_s, role=role, endpoint=url)
    if not got:
        return [GpuSample(t_s=t_s, source="dcgm", role=role, endpoint=url,
                          error="no DCGM GPU metric (DCGM_FI_DEV_*) in the page; is it a dcgm-exporter /metrics?")]
    return got
