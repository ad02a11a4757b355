"""The host CPU as /proc/cpuinfo states it (model name, ISA flags, current clock), parsed once per process."""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuInfo:
    model: str  # "model name" of the first CPU; platform.processor() / machine() where /proc/cpuinfo has none
    flags: frozenset[str]  # ISA flags of the first CPU ("avx2", "amx_bf16", ...); empty when unknown
    mhz: float | None  # "cpu MHz" of the first CPU: the current clock, not the maximum


def parse_cpuinfo(text: str) -> CpuInfo:
    model, flags, mhz = None, None, None
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = val.strip() or None
        elif key == "flags" and flags is None:
            flags = frozenset(val.split())
        elif key == "cpu MHz" and mhz is None:
            try:
                mhz = float(val)
            except ValueError:
                pass
    return CpuInfo(model or platform.processor() or platform.machine(), flags or frozenset(), mhz)


@functools.lru_cache(maxsize=1)
def cpuinfo(path: str = "/proc/cpuinfo") -> CpuInfo:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text)
