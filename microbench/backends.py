"""Compute backends a suite can run on (torch on CUDA or CPU, numpy on CPU), their peaks and caches.

`detect_backends` returns what is present and, for what is not, a reason a suite records as a skip.
Spec peaks: a CUDA device maps to harness/specs/gpus.py by its name; the CPU to the detected
host spec (harness/specs/host.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.specs.host import HostSpec
from microbench.case import Peak
from microbench.timing import FULL, Measurement, TimingPolicy, time_cpu, time_cuda

# substrings of torch.cuda.get_device_name() -> harness/specs/gpus.py slug
GPU_NAME_TO_SPEC: tuple[tuple[str, str], ...] = (
    ("H200", "h200-sxm"),
    ("H100", "h100-sxm"),
    ("H20", "h20-96gb"),
    ("A100-SXM4-80GB", "a100-80gb-sxm"),
    ("A100 80GB", "a100-80gb-sxm"),
    ("A100-PCIE-40GB", "a100-40gb-pcie"),
    ("A100", "a100-80gb-sxm"),
    ("B200", "b200"),
    ("RTX PRO 6000", "rtx-pro-6000"),
)


def gpu_spec_for(device_name: str):
    """The catalog GpuSpec for a device name, or None (its MFU/MBU then stay empty, with a note)."""
    from harness.specs.gpus import GPUS

    for key, slug in GPU_NAME_TO_SPEC:
        if key.lower() in device_name.lower():
            return GPUS[slug]
    return None


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
                return Peak(None, None, f"no spec for GPU {self.device_name!r} in harness/specs/gpus.py")
            return Peak(g.peak_flops_per_s(dtype), g.hbm_bandwidth_bytes_per_s, f"{g.name}: {g.source}")
        h = self.host
        return Peak(h.peak_flops_per_s(dtype), h.memory_bandwidth_bytes_per_s, f"{h.name}: {h.source}")

    def sync(self) -> None:
        if self.is_cuda:
            self.module.cuda.synchronize()

    def time(self, fn: Callable[[], Any], policy: TimingPolicy = FULL, *, flush: Callable[[], Any] | None = None,
             allow_graph: bool = True) -> Measurement:
        if self.is_cuda:
            return time_cuda(fn, self.module, policy, flush=flush, allow_graph=allow_graph)
        return time_cpu(fn, policy, flush=flush)

    def l2_flush(self) -> Callable[[], Any] | None:
        """GPU: zero a buffer twice the L2 before each sample, so inputs come from HBM."""
        if not self.is_cuda or not self.cache_bytes:
            return None
        buf = self.module.empty(int(2 * self.cache_bytes), dtype=self.module.uint8, device=self.device)
        return buf.zero_

    # ---- array helpers, the same call on both backends ----
    def dtype_of(self, dtype: str) -> Any:
        if self.name == "torch":
            t = self.module
            return {"fp32": t.float32, "bf16": t.bfloat16, "fp16": t.float16, "fp64": t.float64, "fp8": getattr(t, "float8_e4m3fn", None)}[dtype]
        import numpy as np

        return {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}.get(dtype)

    def randn(self, shape: tuple[int, ...], dtype: str, seed: int = 0) -> Any:
        if self.name == "torch":
            g = self.module.Generator(device=self.device).manual_seed(seed)
            x = self.module.randn(shape, generator=g, device=self.device, dtype=self.module.float32)
            return x.to(self.dtype_of(dtype))
        import numpy as np

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


def detect_backends(host: HostSpec, device: str = "auto", want: tuple[str, ...] = ("torch", "numpy")) -> Detected:
    """torch-cuda (when a GPU is there and `device` allows), torch-cpu and numpy-cpu."""
    det = Detected()
    llc = _llc_bytes()
    if "torch" in want:
        try:
            import torch

            det.torch_version = torch.__version__
            det.cuda_version = torch.version.cuda
            has_cuda = torch.cuda.is_available()
            if has_cuda:
                det.gpu_names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if device in ("auto", "cuda"):
                if has_cuda:
                    name = det.gpu_names[0]
                    props = torch.cuda.get_device_properties(0)
                    det.backends.append(Backend("torch", "cuda:0", torch, host, name, gpu_spec_for(name),
                                                float(getattr(props, "L2_cache_size", 0)) or None, "L2"))
                else:
                    det.missing.append(("torch-cuda", f"no CUDA device visible to torch {torch.__version__}"))
            if device in ("auto", "cpu"):
                det.backends.append(Backend("torch", "cpu", torch, host, host.cpu_model, None, llc, "LLC"))
        except ImportError as exc:
            det.missing.append(("torch", f"torch is not installed ({exc}); pip install torch==2.13.0"))
    if "numpy" in want and device in ("auto", "cpu"):
        import numpy

        det.backends.append(Backend("numpy", "cpu", numpy, host, host.cpu_model, None, llc, "LLC"))
    return det
