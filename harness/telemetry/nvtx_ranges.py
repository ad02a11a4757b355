"""NVTX ranges around every measured case, so an Nsight timeline shows which case ran when.

A no-op (contextlib.nullcontext) when the `nvtx` package or a GPU is absent; `status()` gives
the one line the manifest carries.
"""

from __future__ import annotations

import contextlib
from functools import lru_cache
from typing import Any, ContextManager

DOMAIN = "harness"


@lru_cache(maxsize=1)
def _state() -> tuple[Any | None, str]:
    try:
        import nvtx
    except ImportError as exc:
        return None, f"NVTX ranges off: nvtx not installed ({exc})"
    from harness.telemetry.nvml import status as nvml_status

    has_gpu, why = nvml_status()
    if not has_gpu:
        return None, f"NVTX ranges off: no GPU ({why})"
    return nvtx, "NVTX ranges on (domain 'harness')"


def enabled() -> bool:
    return _state()[0] is not None


def status() -> tuple[bool, str]:
    mod, line = _state()
    return mod is not None, line


def nvtx_range(name: str, color: str = "blue") -> ContextManager[Any]:
    """`with nvtx_range("gemm:qkv-t512"):` — annotates the timeline where NVTX works, else does nothing."""
    mod = _state()[0]
    if mod is None:
        return contextlib.nullcontext()
    return mod.annotate(message=name, color=color, domain=DOMAIN)
