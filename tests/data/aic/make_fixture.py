"""Write the aiconfigurator-schema fixture of tests/importers/test_aic.py: a few rows per table, from known constants.

The layout and columns are those of the aiconfigurator-core 0.12.0 wheel (systems/data/<system>/<op>/<engine>/
<version>/*.parquet, `latency` in ms, `message_size` in elements); the numbers are not measurements: each latency
follows from the constants below, so the tests can check the importer and the fit recover them.
Run from the repository root: `python tests/data/aic/make_fixture.py` (deterministic).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

ROOT = Path(__file__).parent / "systems"
DEVICE = "NVIDIA H200"
PEAK_FLOPS = {"bfloat16": 989.4e12, "fp8": 1978.9e12}  # harness/specs/gpus.py h200-sxm
PEAK_BYTES = 4800e9
GEMM_MFU = 0.8  # a compute-bound GEMM reaches 80 % of the dense peak
GEMM_MBU = 0.7  # a bandwidth-bound one 70 % of the HBM peak
ATTN_MBU = 0.6  # generation attention reads its KV at 60 % of the HBM peak
ALPHA_S = {2: 5e-6, 8: 12e-6}  # custom all-reduce: T(S) = α + S/β
BETA = {2: 300e9, 8: 200e9}
ELEM = {"bfloat16": 2, "fp8": 1}
# qwen3-8b's projections (N, K), gate and up as two GEMMs of N = 12288 (the grid's shape)
SHAPES = [(6144, 4096), (4096, 4096), (12288, 4096), (4096, 12288)]
M_VALUES = [1, 2, 4, 8, 16, 17, 32, 64, 128, 512, 1024, 2048]


def gemm_ms(m: int, n: int, k: int, dtype: str) -> float:
    flops = 2 * m * n * k
    nbytes = (m * k + k * n) * ELEM[dtype] + m * n * 2
    return max(flops / (GEMM_MFU * PEAK_FLOPS[dtype]), nbytes / (GEMM_MBU * PEAK_BYTES)) * 1e3


def attn_ms(b: int, keys: int, kv_bytes: int) -> float:
    return (b * keys * 2 * 8 * 128 * kv_bytes + b * 32 * 128 * 4) / (ATTN_MBU * PEAK_BYTES) * 1e3


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def main() -> None:
    base = {"framework": "VLLM", "version": "0.24.0", "device": DEVICE}
    gemm = [{**base, "op_name": "gemm", "kernel_source": "torch.nn.functional.linear" if dt == "bfloat16" else "cutlass",
             "gemm_dtype": dt, "m": m, "n": n, "k": k, "latency": gemm_ms(m, n, k, dt)}
            for dt in ("bfloat16", "fp8") for m in M_VALUES for n, k in SHAPES]
    # one GEMM faster than the HBM peak allows (an L2-resident operand): flagged by the importer, never fitted
    gemm.append({**base, "op_name": "gemm", "kernel_source": "torch.nn.functional.linear", "gemm_dtype": "bfloat16",
                 "m": 1, "n": 64, "k": 64, "latency": 1e-6})
    write(ROOT / "data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", gemm)
    gen = [{**base, "op_name": "generation_attention", "kernel_source": "vllm_flash_attn_fa3", "batch_size": b, "isl": 1,
            "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "beam_width": 1, "attn_dtype": "bfloat16",
            "kv_cache_dtype": kv, "step": c - 1, "window_size": 0, "latency": attn_ms(b, c, ELEM[kv])}
           for kv in ("bfloat16", "fp8") for c in (1024, 4096) for b in (1, 2, 4, 8, 16, 32, 64)]
    write(ROOT / "data/h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet", gen)
    ctx = [{**base, "op_name": "context_attention", "kernel_source": "vllm_flash_attn_fa3", "batch_size": 1, "isl": s,
            "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "beam_width": 1, "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16", "step": 0, "window_size": 0, "latency": 4 * 32 * 128 * s * (s + 1) / 2
            / (0.5 * PEAK_FLOPS["bfloat16"]) * 1e3} for s in (1024, 4096)]
    write(ROOT / "data/h200_sxm/attention/vllm/0.24.0/context_attention_perf.parquet", ctx)
    moe = [{**base, "op_name": "moe", "kernel_source": "vllm_unquantizedfusedmoe_triton_tritonexperts",
            "moe_dtype": "bfloat16", "num_tokens": t, "hidden_size": 4096, "inter_size": 1536, "topk": 8,
            "num_experts": 128, "moe_tp_size": 1, "moe_ep_size": 1, "distribution": "balanced",
            "latency": 2 * 3 * 4096 * 1536 * t * 8 / (0.4 * PEAK_FLOPS["bfloat16"]) * 1e3} for t in (1024, 8192)]
    write(ROOT / "data/h200_sxm/moe/vllm/0.24.0/moe_perf.parquet", moe)
    car = [{"framework": "vLLM", "version": "0.24.0", "device": DEVICE, "op_name": "all_reduce",
            "kernel_source": "vLLM_custom_graph", "allreduce_dtype": "bfloat16", "num_gpus": n, "message_size": e,
            "latency": (ALPHA_S[n] + 2 * e / BETA[n]) * 1e3, "backend": "vllm_graph"}
           for n in (2, 8) for e in (4096, 65536, 1 << 20, 1 << 24)]
    write(ROOT / "data/h200_sxm/comm/vllm/0.24.0/custom_allreduce_perf.parquet", car)
    # NCCL rows: the folder names one NCCL version, the rows another, and every size appears twice (as in 0.12.0)
    nccl = [{"framework": "TRTLLM", "version": "2.29.2", "device": DEVICE, "op_name": "all_reduce", "kernel_source": "NCCL",
             "nccl_dtype": "half", "num_gpus": 8, "message_size": e, "latency": (20e-6 + 2 * e / 250e9) * 1e3 * f}
            for f in (1.0, 1.02) for e in (4096, 65536, 1 << 20, 1 << 24)]
    write(ROOT / "data/h200_sxm/comm/nccl/2.26.2/nccl_perf.parquet", nccl)
    (ROOT / "h200_sxm.yaml").write_text("data_dir: data/h200_sxm\nmisc:\n  nccl_version: '2.26.2'\n")
    for op in ("gemm", "attention"):
        (ROOT / f"data/h200_sxm/{op}/vllm/0.24.0/collection_meta.yaml").write_text(
            "schema_version: 1\nprovenance: collected\nruntime:\n  framework: vllm\n  version: 0.24.0\n")


if __name__ == "__main__":
    main()
