"""CPU spec catalog: measured effective matmul throughput per kernel and DRAM bandwidth per NUMA path.

Unlike GPUs (datasheet peaks derated by an efficiency), the chapter's CPU figures are what a paper
measured for one kernel on one machine, so they are used as effective values directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import positive, positive_int, unknown

CpuKernel = Literal["avx512", "amx"]
NumaPath = Literal["local", "remote"]

CPU_KERNELS: tuple[str, ...] = ("avx512", "amx")
NUMA_PATHS: tuple[str, ...] = ("local", "remote")


@dataclass(frozen=True, slots=True)
class CpuSpec:
    name: str  # stable slug, e.g. "xeon-platinum-8452y"
    cores_per_socket: int
    avx512_flops_per_s: float  # measured MoE-layer matmul throughput of an AVX-512 kernel, one socket
    amx_flops_per_s: float  # same with an AMX (Advanced Matrix Extensions) kernel
    local_dram_bandwidth_bytes_per_s: float  # a thread reading its own socket's DRAM
    remote_dram_bandwidth_bytes_per_s: float  # a thread reading the other socket's DRAM (NUMA)
    dram_capacity_bytes_per_socket: float
    source: str

    def __post_init__(self) -> None:
        owner = f"CPU spec {self.name!r}"
        positive_int(owner, "cores_per_socket", self.cores_per_socket)
        for f in (
            "avx512_flops_per_s", "amx_flops_per_s", "local_dram_bandwidth_bytes_per_s",
            "remote_dram_bandwidth_bytes_per_s", "dram_capacity_bytes_per_socket",
        ):
            positive(owner, f, getattr(self, f))

    def flops_per_s(self, kernel: str) -> float:
        """Effective matmul FLOP/s of one kernel kind ("avx512" or "amx")."""
        if kernel == "avx512":
            return self.avx512_flops_per_s
        if kernel == "amx":
            return self.amx_flops_per_s
        raise HarnessError(f"CPU kernel {kernel!r} is unknown; known: {', '.join(CPU_KERNELS)}.")

    def dram_bandwidth_bytes_per_s(self, numa: str) -> float:
        """DRAM read bandwidth for weights on the same socket ("local") or the other one ("remote")."""
        if numa == "local":
            return self.local_dram_bandwidth_bytes_per_s
        if numa == "remote":
            return self.remote_dram_bandwidth_bytes_per_s
        raise HarnessError(f"NUMA path {numa!r} is unknown; known: {', '.join(NUMA_PATHS)}.")


CPUS: dict[str, CpuSpec] = {
    c.name: c
    for c in [
        CpuSpec(
            name="xeon-platinum-8452y",
            cores_per_socket=36,
            avx512_flops_per_s=1.8e12,
            amx_flops_per_s=21.3e12,
            local_dram_bandwidth_bytes_per_s=220e9,
            remote_dram_bandwidth_bytes_per_s=125e9,
            dram_capacity_bytes_per_socket=1e12,
            source=(
                "KTransformers paper test machine (2× Xeon Platinum 8452Y, 36 cores and 1 TB DDR5 each): "
                "AVX-512 PyTorch kernel 1.8 TFLOP/s and AMX KTransformers kernel 21.3 TFLOP/s on one socket "
                "(paper pp. 4, 6); Intel MLC 220 GB/s in-socket, 125 GB/s cross-socket (paper p. 10); "
                "Chapter 9, example 9.3 and footnote 9"
            ),
        ),
    ]
}


def get_cpu(name: str) -> CpuSpec:
    try:
        return CPUS[name]
    except KeyError:
        raise unknown("CPU spec", name, list(CPUS)) from None
