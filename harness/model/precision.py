"""Serving precision: bytes per weight (dense layers, routed experts), the GEMMs' compute dtype, bytes per KV element.

A precision names what an engine does with a checkpoint: `fp8` is W8A8 (weights and activations in FP8, the
GEMMs on FP8 tensor cores at the datasheet's FP8 peak), `fp8-block` the same with 128×128 block scales
(DeepSeek-V3/R1, Qwen3 FP8), `mxfp4` and `int4-wo` are weight-only formats of the routed experts (the GEMM
dequantizes to BF16 and computes at the BF16 peak on Hopper), `bf16` is the checkpoint as trained.
Embeddings, the LM head, norms and MoE routers stay BF16 in every FP8/FP4 checkpoint we model (their
quantization configs exclude them). The KV dtype is the engine's choice and is given separately.

Refused, each with its reason: NVFP4 (FP4 tensor cores exist only on Blackwell; there is no FP4 kernel
constant for any GPU here), generic INT8/INT4 W8A8 (no kernel constants measured for them).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.specs.gpus import GpuSpec

BF16_BYTES = 2.0


@dataclass(frozen=True, slots=True)
class Precision:
    name: str
    weight_bytes_per_param: float  # attention and dense FFN / shared-expert linear layers
    expert_weight_bytes_per_param: float  # routed experts
    gemm_dtype: str  # compute dtype of the linear layers: "bf16" | "fp8"
    expert_gemm_dtype: str
    source: str
    weight_only_experts: bool = False  # routed experts dequantized to BF16 inside the GEMM

    @property
    def gemm_kernel(self) -> str:
        """The kernel family of the dense GEMMs (block-scaled FP8 runs other kernels than per-tensor FP8)."""
        return "fp8-block" if self.name == "fp8-block" else self.gemm_dtype

    @property
    def expert_gemm_kernel(self) -> str:
        if self.weight_only_experts:
            return f"{self.name}-wo"
        return "fp8-block" if self.name == "fp8-block" else self.expert_gemm_dtype

    def gemm_peak_flops_per_s(self, gpu: GpuSpec, experts: bool = False) -> float:
        """Datasheet peak of the GEMMs' compute dtype on `gpu`."""
        dtype = self.expert_gemm_dtype if experts else self.gemm_dtype
        peak = gpu.peak_flops_per_s(dtype)
        if peak is None:
            raise HarnessError(f"precision {self.name!r}: {gpu.name} has no {dtype.upper()} tensor-core peak in its datasheet "
                               f"(FP8 needs Hopper or newer); give precision bf16.")
        return peak


# bytes per parameter of the 4-bit formats: MXFP4 = 4 bits + one 8-bit scale per 32 values; INT4 weight-only with a
# BF16 scale per group of 32 (Kimi-K2.5's quantization config)
MXFP4_BYTES = (4 + 8 / 32) / 8
INT4_G32_BYTES = (4 + 16 / 32) / 8

PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in [
        Precision("bf16", 2.0, 2.0, "bf16", "bf16", "BF16 weights and activations (the checkpoint as trained)"),
        Precision("fp8", 1.0, 1.0, "fp8", "fp8", "W8A8 FP8 (E4M3), per-tensor or per-channel scales; GEMMs at the FP8 peak"),
        Precision("fp8-block", 1.0, 1.0, "fp8", "fp8",
                  "W8A8 FP8 with 128×128 block scales (DeepSeek-V3/R1, Qwen3 FP8 checkpoints); scales ≈ 0.01 % of the bytes"),
        Precision("mxfp4", 2.0, MXFP4_BYTES, "bf16", "bf16",
                  "MXFP4 routed experts (4 bits + an 8-bit scale per 32 values, gpt-oss's checkpoint), everything else "
                  "BF16; on Hopper the expert GEMMs dequantize to BF16 (weight-only)", weight_only_experts=True),
        Precision("int4-wo", 2.0, INT4_G32_BYTES, "bf16", "bf16",
                  "INT4 weight-only routed experts (group 32, BF16 scales: Kimi-K2.5), everything else BF16",
                  weight_only_experts=True),
    ]
}

REFUSED: dict[str, str] = {
    "nvfp4": "NVFP4 GEMMs need FP4 tensor cores (Blackwell: B200, GB200); this harness has no FP4 peak or kernel "
             "constant for any GPU, so it cannot predict them",
    "fp4": "FP4 GEMMs need FP4 tensor cores (Blackwell); for gpt-oss give mxfp4 (its checkpoint's weight-only format)",
    "int8": "INT8 W8A8 GEMMs are not modelled (no kernel constants measured for them); give fp8 or bf16",
    "int4": "INT4 W4A4 GEMMs are not modelled; for weight-only INT4 experts give int4-wo",
}

ALIASES = {"fp8_block": "fp8-block", "bfloat16": "bf16", "fp16": "bf16", "int4_wo": "int4-wo"}


def get_precision(name: str, field: str = "precision") -> Precision:
    """A supported precision by name; a refused or unknown one raises naming the field, the reason and the fix."""
    key = ALIASES.get(name, name)
    if key in PRECISIONS:
        return PRECISIONS[key]
    if key in REFUSED:
        raise HarnessError(f"{field} = {name!r} is not supported: {REFUSED[key]}. Supported: {', '.join(PRECISIONS)}.")
    raise HarnessError(f"{field} = {name!r} is unknown; supported: {', '.join(PRECISIONS)} (refused: {', '.join(REFUSED)}).")
