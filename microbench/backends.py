"""Compute backends a suite can run on (torch on CUDA or CPU, numpy on CPU), their peaks and caches.

`detect_backends` returns what is present and, for what is not, a reason a suite records as a skip.
Spec peaks: a CUDA device maps to harness/specs/gpus.py by its exact product name, checked against
its SM count and memory (microbench/gpu_identity.py; no guess from a similar name); the CPU to the
detected host spec (harness/specs/host.py). GPU timing flushes the L2 before every timed call unless
the case rotates its own buffers (`Backend.time(..., l2=...)`) and reads the device's clocks through
NVML by its PCI bus id (microbench/gpu_link.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import numpy

from harness.specs.host import HostSpec
from microbench.case import Peak
from microbench.gpu_identity import identify, identify_torch_device
from microbench.gpu_link import clock_probe
from microbench.timing import FULL, Measurement, TimingPolicy, time_cpu, time_cuda

L2_FLUSH_MIN_BYTES = 256 * 2**20  # triton.testing.do_bench zeroes 256 MB; never less than 2x the L2
L2_MODES = ("flush", "rotated", "warm")


def gpu_spec_for(device_name: str, sm_count: int | None = None, memory_bytes: float | None = None):
    """The catalog GpuSpec for a device's exact product name (checked against SM count and memory when given),
    or None (its MFU/MBU then stay empty; `microbench.gpu_identity.identify` says why)."""
    return identify(device_name, sm_count, memory_bytes).spec


@dataclass
class Backend:
    name: str  # "torch" | "numpy"
    device: str  # "cpu" | "cuda:0"
    module: Any  # the imported torch or numpy
    host: HostSpec
    device_name: str = ""
    gpu_spec: Any = None
    cache_bytes: float | None = None  # L2 on a GPU, last-level cache on the CPU
    cache_name: str = "LLC"
    spec_note: str = ""  # how the GPU spec was chosen, or why there is none
    clocks: Any = None  # microbench.gpu_link.NvmlClocks of this device, or None
    index: int = 0  # torch device index
    _flush_buf: Any = field(default=None, repr=False)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def label(self) -> str:
        return f"{self.name}-{'cuda' if self.is_cuda else 'cpu'}"

    def peak(self, dtype: str, memory: str = "dram") -> Peak:
        """Spec peak for compute in `dtype` and for the memory the case streams."""
        if self.is_cuda:
            g = self.gpu_spec
            if g is None:
                return Peak(None, None, self.spec_note or f"no spec for GPU {self.device_name!r} in harness/specs/gpus.py")
            return Peak(g.peak_flops_per_s(dtype), g.hbm_bandwidth_bytes_per_s, f"{g.name}: {g.source}")
        h = self.host
        return Peak(h.peak_flops_per_s(dtype), h.memory_bandwidth_bytes_per_s, f"{h.name}: {h.source}")

    def sync(self) -> None:
        if self.is_cuda:
            self.module.cuda.synchronize()

    def time(self, fn: Callable[[], Any], policy: TimingPolicy = FULL, *, flush: Callable[[], Any] | None = None,
             allow_graph: bool = True, l2: str = "flush") -> Measurement:
        """Time `fn`. GPU, `l2`: "flush" zeroes a buffer larger than the L2 before every timed call (as
        triton.testing.do_bench does, the default); "rotated" means the caller rotates buffers that together
        exceed 2x the L2 (copies, GEMM input sets); "warm" times repeats on purpose from cache. CPU: no flush."""
        if l2 not in L2_MODES:
            raise ValueError(f"l2 must be one of {L2_MODES}, got {l2!r}")
        if self.is_cuda:
            if flush is None and l2 == "flush":
                flush = self.l2_flush()
            return time_cuda(fn, self.module, policy, flush=flush, allow_graph=allow_graph, clocks=self.clocks)
        return time_cpu(fn, policy, flush=flush)

    def l2_flush_bytes(self) -> int:
        return int(max(2 * (self.cache_bytes or 0), L2_FLUSH_MIN_BYTES))

    def l2_flush(self) -> Callable[[], Any] | None:
        """GPU: a callable zeroing a buffer of max(2x L2, 256 MiB) (allocated once), so the next call reads from HBM."""
        if not self.is_cuda:
            return None
        if self._flush_buf is None:
            self._flush_buf = self.module.empty(self.l2_flush_bytes(), dtype=self.module.uint8, device=self.device)
        return self._flush_buf.zero_

    # ---- array helpers, the same call on both backends ----
    def dtype_of(self, dtype: str) -> Any:
        if self.name == "torch":
            t = self.module
            return {"fp32": t.float32, "bf16": t.bfloat16, "fp16": t.float16, "fp64": t.float64, "fp8": getattr(t, "float8_e4m3fn", None)}[dtype]

        return {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}.get(dtype)

    def randn(self, shape: tuple[int, ...], dtype: str, seed: int = 0) -> Any:
        if self.name == "torch":
            g = self.module.Generator(device=self.device).manual_seed(seed)
            x = self.module.randn(shape, generator=g, device=self.device, dtype=self.module.float32)
            return x.to(self.dtype_of(dtype))

        return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(self.dtype_of(dtype))

    def supports(self, dtype: str) -> str | None:
        """None if `dtype` works here, else the reason it does not."""
        if self.name == "numpy":
            return None if dtype in ("fp32", "fp64") else f"numpy has no fast {dtype} matmul (fp16 runs in software, bf16 does not exist)"
        if dtype == "fp8":
            if not self.is_cuda:
                return "fp8 matmul needs a GPU with fp8 tensor cores"
            major, minor = self.module.cuda.get_device_capability()
            if (major, minor) < (8, 9):
                return f"fp8 needs compute capability >= 8.9, this GPU has {major}.{minor}"
        if dtype == "fp16" and not self.is_cuda:
            return "fp16 matmul on the CPU runs without a fast kernel in torch; measured on the GPU only"
        return None


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the host CPU has bf16 matrix instructions (x86 avx512_bf16 / amx_bf16, Arm bf16); unknown counts as yes."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return True
    flags = set()
    for line in cpuinfo.splitlines():
        if line.lower().startswith(("flags", "features")):
            flags |= set(line.split(":", 1)[-1].split())
    if not flags:
        return True
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def quick_bf16_skip(b: "Backend", dtype: str) -> str | None:
    """--quick only: the reason to skip a bf16 matmul on a CPU that has to emulate bf16, else None."""
    if b.name == "torch" and not b.is_cuda and dtype == "bf16" and not cpu_has_native_bf16():
        return ("this CPU has no native bf16 matrix instructions (no avx512_bf16 / amx_bf16 in /proc/cpuinfo): torch emulates "
                "bf16 matmul, ~100x slower than fp32 at these shapes (a 32x4096x4096 product took ~40 s on such a machine); "
                "--quick skips it, a full run measures it")
    return None


def _llc_bytes() -> float | None:
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in base.glob("index*"):
            size = (idx / "size").read_text().strip()
            level = int((idx / "level").read_text().strip())
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1], 1)
            val = float(size.rstrip("KMG")) * mult
            if best is None or level >= best[0]:
                best = (level, val)
    except (OSError, ValueError):
        return None
    return best[1] if best else None


@dataclass
class Detected:
    backends: list[Backend] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (backend label, reason)
    torch_version: str | None = None
    cuda_version: str | None = None
    gpu_names: list[str] = field(default_factory=list)


def cuda_backend(torch: Any, host: HostSpec, index: int = 0) -> Backend:
    """The torch backend of CUDA device `index`: spec by exact product name (SM count and memory checked),
    its L2 size, and an NVML clock probe found by the device's PCI bus id."""
    props = torch.cuda.get_device_properties(index)
    ident = identify_torch_device(torch, index)
    return Backend("torch", f"cuda:{index}", torch, host, ident.device_name, ident.spec,
                   float(getattr(props, "L2_cache_size", 0)) or None, "L2", ident.reason, clock_probe(torch, index), index)


def detect_backends(host: HostSpec, device: str = "auto", want: tuple[str, ...] = ("torch", "numpy")) -> Detected:
    """torch-cuda (when a GPU is there and `device` allows), torch-cpu and numpy-cpu."""
    det = Detected()
    llc = _llc_bytes()
    if "torch" in want:
        try:
            # lazy: optional (the torch extra): a host without it runs the numpy suites
            import torch

            det.torch_version = torch.__version__
            det.cuda_version = torch.version.cuda
            has_cuda = torch.cuda.is_available()
            if has_cuda:
                det.gpu_names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if device in ("auto", "cuda"):
                if has_cuda:
                    det.backends.append(cuda_backend(torch, host, 0))
                else:
                    det.missing.append(("torch-cuda", f"no CUDA device visible to torch {torch.__version__}"))
            if device in ("auto", "cpu"):
                det.backends.append(Backend("torch", "cpu", torch, host, host.cpu_model, None, llc, "LLC"))
        except ImportError as exc:
            det.missing.append(("torch", f"torch is not installed ({exc}); pip install torch==2.13.0"))
    if "numpy" in want and device in ("auto", "cpu"):
        det.backends.append(Backend("numpy", "cpu", numpy, host, host.cpu_model, None, llc, "LLC"))
    return det
