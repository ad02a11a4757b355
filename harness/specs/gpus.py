"""GPU spec catalog: datasheet peaks (dense, no sparsity) with where each number comes from."""

from __future__ import annotations

from dataclasses import dataclass

from harness.specs._validate import positive, unknown


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str  # stable slug, e.g. "a100-80gb-sxm"
    peak_bf16_flops_per_s: float
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: float
    source: str
    peak_fp8_flops_per_s: float | None = None
    peak_fp16_flops_per_s: float | None = None
    peak_fp32_flops_per_s: float | None = None

    def __post_init__(self) -> None:
        owner = f"GPU spec {self.name!r}"
        positive(owner, "peak_bf16_flops_per_s", self.peak_bf16_flops_per_s)
        positive(owner, "hbm_bandwidth_bytes_per_s", self.hbm_bandwidth_bytes_per_s)
        positive(owner, "hbm_capacity_bytes", self.hbm_capacity_bytes)
        for f in ("peak_fp8_flops_per_s", "peak_fp16_flops_per_s", "peak_fp32_flops_per_s"):
            v = getattr(self, f)
            if v is not None:
                positive(owner, f, v)

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Dense peak for a compute dtype, or None where the datasheet gives none."""
        return {
            "bf16": self.peak_bf16_flops_per_s,
            "fp16": self.peak_fp16_flops_per_s or self.peak_bf16_flops_per_s,
            "fp8": self.peak_fp8_flops_per_s,
            "fp32": self.peak_fp32_flops_per_s,
        }.get(dtype)


_CH9 = "Chapter 9, §9.2.3 hardware table"

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec(
            "a100-80gb-sxm", 312e12, 2039e9, 80e9,
            f"NVIDIA A100 datasheet (80GB SXM: 312 TFLOP/s dense BF16, 2039 GB/s HBM2e); {_CH9}",
            peak_fp16_flops_per_s=312e12, peak_fp32_flops_per_s=19.5e12,
        ),
        GpuSpec(
            "a100-40gb-pcie", 312e12, 1555e9, 40e9,
            "NVIDIA A100 datasheet (40GB PCIe: 312 TFLOP/s dense BF16, 1555 GB/s); Chapter 9, example 9.3",
            peak_fp16_flops_per_s=312e12, peak_fp32_flops_per_s=19.5e12,
        ),
        GpuSpec(
            "h20-96gb", 148e12, 4096e9, 96e9,
            "MegaScale-Infer table 3 (148 TFLOP/s BF16, 4096 GB/s), 96 GB from NVIDIA AI Enterprise vGPU docs; "
            f"{_CH9} and footnote 5 (NVIDIA publishes no H20 datasheet)",
            peak_fp8_flops_per_s=296e12, peak_fp16_flops_per_s=148e12,
        ),
        GpuSpec(
            "h100-sxm", 989.4e12, 3350e9, 80e9,
            "NVIDIA H100 datasheet (SXM5: 989.4 TFLOP/s dense BF16, 3.35 TB/s HBM3); Chapter 9, footnote 14",
            peak_fp8_flops_per_s=1978.9e12, peak_fp16_flops_per_s=989.4e12, peak_fp32_flops_per_s=66.9e12,
        ),
        GpuSpec(
            "h200-sxm", 989.4e12, 4800e9, 141e9,
            "NVIDIA H200 datasheet (SXM: 989 TFLOP/s dense BF16 = H100 SXM, 4.8 TB/s HBM3e, 141 GB)",
            peak_fp8_flops_per_s=1978.9e12, peak_fp16_flops_per_s=989.4e12, peak_fp32_flops_per_s=66.9e12,
        ),
        # added with microbench/gpu_identity.py (exact product names): the parts a substring match used to mis-map
        GpuSpec(
            "a100-40gb-sxm", 312e12, 1555e9, 40e9,
            "NVIDIA A100 datasheet (40GB SXM: 312 TFLOP/s dense BF16, 1555 GB/s HBM2)",
            peak_fp16_flops_per_s=312e12, peak_fp32_flops_per_s=19.5e12,
        ),
        GpuSpec(
            "a100-80gb-pcie", 312e12, 1935e9, 80e9,
            "NVIDIA A100 datasheet (80GB PCIe: 312 TFLOP/s dense BF16, 1935 GB/s HBM2e)",
            peak_fp16_flops_per_s=312e12, peak_fp32_flops_per_s=19.5e12,
        ),
        GpuSpec(
            "h100-pcie", 756.5e12, 2000e9, 80e9,
            "NVIDIA H100 datasheet (PCIe: 1513 TFLOP/s BF16 with sparsity -> 756.5 dense, 2.0 TB/s HBM2e, 80 GB)",
            peak_fp8_flops_per_s=1513e12, peak_fp16_flops_per_s=756.5e12, peak_fp32_flops_per_s=51.2e12,
        ),
        GpuSpec(
            "h100-nvl", 835.5e12, 3900e9, 94e9,
            "NVIDIA H100 NVL datasheet (per GPU: 1671 TFLOP/s BF16 with sparsity -> 835.5 dense, 3.9 TB/s HBM3, 94 GB)",
            peak_fp8_flops_per_s=1670.5e12, peak_fp16_flops_per_s=835.5e12, peak_fp32_flops_per_s=60e12,
        ),
        GpuSpec(
            "h200-nvl", 835.5e12, 4800e9, 141e9,
            "NVIDIA H200 NVL datasheet (1671 TFLOP/s BF16 with sparsity -> 835.5 dense, 4.8 TB/s HBM3e, 141 GB)",
            peak_fp8_flops_per_s=1670.5e12, peak_fp16_flops_per_s=835.5e12, peak_fp32_flops_per_s=60e12,
        ),
        GpuSpec(
            "b200", 2250e12, 8000e9, 180e9,
            "NVIDIA HGX B200 datasheet (per GPU: 4.5 PFLOP/s BF16 with sparsity -> 2.25 dense, 8 TB/s, 180 GB HBM3e)",
            peak_fp8_flops_per_s=4500e12, peak_fp16_flops_per_s=2250e12,
        ),
        GpuSpec(
            "rtx-pro-6000", 503.8e12, 1792e9, 96e9,
            "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (96 GB GDDR7, 1792 GB/s); dense BF16 "
            "tensor peak 503.8 TFLOP/s from the Blackwell architecture whitepaper (treat as approximate)",
            peak_fp8_flops_per_s=1007.6e12, peak_fp16_flops_per_s=503.8e12,
        ),
    ]
}


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise unknown("GPU spec", name, list(GPUS), "List them with `harness specs list`.") from None
