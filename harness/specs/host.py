"""The detected host CPU as a spec: usable cores, peak FLOP/s and memory bandwidth, and where each came from.

A microbenchmark's MFU/MBU on the CPU is measured against this spec. Peaks are either declared
(environment variables, e.g. from a datasheet or a vendor tool such as Intel MLC) or derived from
the ISA flags of /proc/cpuinfo:

    peak_flops_per_s = usable_cores × clock_hz × flops_per_cycle_per_core(dtype)

with 64 fp32 FLOP/cycle for AVX-512 (two 16-lane FMA units, 2 FLOP per FMA), 32 for AVX2+FMA,
128 bf16 FLOP/cycle for AVX512_BF16 and 1024 for AMX-BF16 (one 16×32 tile multiply per cycle,
512 multiply-adds). The clock is the maximum from cpufreq when the kernel exposes it, else the
current "cpu MHz" (a turbo clock above it can put a measurement over this peak: that is then
flagged, never kept silently). Chapter 9, example 9.3 gives the Xeon 8452Y figures the chapter
uses (1.8 TFLOP/s AVX-512, 21.3 TFLOP/s AMX, 220 GB/s per socket); those live in specs/cpus.py.
The memory bandwidth has no derivation from flags: declare it or MBU stays empty.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.cpuinfo import cpuinfo
from harness.errors import HarnessError
from harness.records import slug

ENV_PEAK_FP32 = "HARNESS_HOST_PEAK_FP32_FLOPS_PER_S"
ENV_PEAK_BF16 = "HARNESS_HOST_PEAK_BF16_FLOPS_PER_S"
ENV_MEM_BW = "HARNESS_HOST_MEMORY_BANDWIDTH_BYTES_PER_S"


@dataclass(frozen=True, slots=True)
class HostSpec:
    name: str  # "host:<cpu model slug>"
    cpu_model: str
    usable_cores: int  # CPUs this process may run on (affinity), not the machine's total
    clock_hz: float | None
    isa: tuple[str, ...]  # the flags the peaks were derived from
    peak_fp32_flops_per_s: float | None
    peak_bf16_flops_per_s: float | None
    memory_bandwidth_bytes_per_s: float | None
    source: str  # how each number was obtained

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Peak for a compute dtype; fp16 uses the bf16 path's figure, fp64 half the fp32 one."""
        if dtype in ("bf16", "fp16"):
            return self.peak_bf16_flops_per_s
        if dtype == "fp32":
            return self.peak_fp32_flops_per_s
        if dtype == "fp64" and self.peak_fp32_flops_per_s:
            return self.peak_fp32_flops_per_s / 2
        return None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["isa"] = list(self.isa)
        return d


def _cpuinfo() -> tuple[str, set[str], float | None]:
    info = cpuinfo()
    return info.model, set(info.flags), info.mhz


def _max_clock_hz() -> float | None:
    p = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        return float(p.read_text().strip()) * 1e3  # kHz
    except (OSError, ValueError):
        return None


def flops_per_cycle_per_core(flags: set[str], dtype: str) -> tuple[float, str]:
    """FLOP per cycle per core that the ISA flags allow for `dtype`, and the instruction path named."""
    if dtype == "bf16":
        if "amx_bf16" in flags:
            return 1024.0, "AMX-BF16"
        if "avx512_bf16" in flags:
            return 128.0, "AVX512_BF16"
    if "avx512f" in flags:
        return 64.0, "AVX-512 FMA ×2"
    if "avx2" in flags and "fma" in flags:
        return 32.0, "AVX2 FMA ×2"
    return 8.0, "SSE (no FMA)"


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        raise HarnessError(f"environment variable {name}={raw!r} must be a positive number in base units; fix or unset it.")
    return v


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def detect_host() -> HostSpec:
    """This machine's CPU as a HostSpec: declared peaks from the environment win over derived ones."""
    model, flags, mhz = _cpuinfo()
    cores = usable_cores()
    clock = _max_clock_hz()
    clock_src = "cpufreq cpuinfo_max_freq"
    if clock is None and mhz:
        clock, clock_src = mhz * 1e6, "/proc/cpuinfo 'cpu MHz' (current clock; turbo may exceed it)"
    sources = []
    peaks: dict[str, float | None] = {}
    for dtype, env in (("fp32", ENV_PEAK_FP32), ("bf16", ENV_PEAK_BF16)):
        declared = _env_float(env)
        if declared is not None:
            peaks[dtype] = declared
            sources.append(f"{dtype} peak declared by {env}")
        elif clock:
            per, path = flops_per_cycle_per_core(flags, dtype)
            peaks[dtype] = cores * clock * per
            sources.append(f"{dtype} peak derived: {cores} cores × {clock / 1e9:.3g} GHz ({clock_src}) × {per:g} FLOP/cycle ({path})")
        else:
            peaks[dtype] = None
            sources.append(f"{dtype} peak unknown: no clock found; declare {env}")
    bw = _env_float(ENV_MEM_BW)
    sources.append(f"memory bandwidth declared by {ENV_MEM_BW}" if bw else f"memory bandwidth not declared (set {ENV_MEM_BW}); MBU left empty")
    isa = tuple(sorted(f for f in flags if f in {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16"}))

    return HostSpec(
        name=f"host:{slug(model)}",
        cpu_model=model,
        usable_cores=cores,
        clock_hz=clock,
        isa=isa,
        peak_fp32_flops_per_s=peaks["fp32"],
        peak_bf16_flops_per_s=peaks["bf16"],
        memory_bandwidth_bytes_per_s=bw,
        source="; ".join(sources),
    )
