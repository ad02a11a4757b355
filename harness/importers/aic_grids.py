"""aiconfigurator's kernel measurements as the step model's interpolation tables (harness.model.kernel_tables).

Read through harness.importers.aic_files (the one reader of aiconfigurator's parquet files), from the installed package
or a folder, never from a network. Used by `harness predict --calibration aic` (harness.predict.kernel_data, which keeps
a disk cache) and by `harness micro import-aic`, which files the same tables into the run and from there into the GPU
calibration database entry (calibration/gpus/<gpu>/aic-<engine>-<version>.json, `kernel_tables`), so the default
`--calibration auto` reads the same tables without aiconfigurator installed.

| table | file | kept |
|---|---|---|
| GEMM (M, N, K) | `gemm/<engine>/<v>/gemm_perf.parquet` | the engine's BF16, per-tensor FP8 and block-scaled FP8 kernels |
| decode attention (batch, context) | `attention/<engine>/<v>/generation_attention_perf.parquet` | BF16 attention, window 0, the engine's Hopper kernel |
| prefill attention (batch, prompt) | `attention/<engine>/<v>/context_attention_perf.parquet` | the same |
| all-reduce (bytes) | `comm/<engine>/<v>/custom_allreduce_perf.parquet` | the engine's custom all-reduce in CUDA-graph mode; `message_size` counts BF16 elements |
| FP8 scale computation (M, K) | `quantize/trtllm/<v>/computescale_perf.parquet` | subtracted from TensorRT-LLM's FP8 GEMMs (below) |
| MoE layer (tokens) | `moe/<engine>/<v>/moe_perf.parquet` | the engine's fused-MoE kernel per expert dtype, `balanced` routing (the model's uniform-routing assumption, §9.3.3) |
| MLA attention (batch, length) | `mla/<engine>/<v>/{generation,context}_mla_perf.parquet` | SGLang's and TensorRT-LLM's MLA kernels, measured at tp_size 1 by heads per card |

TensorRT-LLM's FP8 GEMM table was collected with weights that carry no input scale, so each entry includes the
dynamic computation of the activation scale (the collector says so, and measures that overhead separately in
`computescale_perf`); an FP8 checkpoint carries static input scales and does not pay it, so the measured
compute-scale time at the same (M, K) is subtracted from each FP8 entry (never below half the entry).

The newest version folder holding each table is used unless a version is asked for (the kernels of one engine change
little between the versions the tables hold; which version each table came from is in `KernelTables.source`).
Latencies are stored in milliseconds and converted to seconds here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.errors import HarnessError
from harness.importers.aic_files import database_name, read_table, table_path, version_key, versions
from harness.model.kernel_tables import AttentionKey, GridTable, KernelTables, MoeKey, grid_from_points

ENGINES = ("vllm", "sglang", "trtllm")

# kernel_source (and gemm_dtype) -> the step model's GEMM kernel family, per engine
_GEMM_KERNELS = {
    "vllm": {("torch.nn.functional.linear", "bfloat16"): "bf16", ("CutlassFP8ScaledMMLinearKernel", "fp8"): "fp8",
             ("DeepGemmFp8BlockScaledMMKernel", "fp8_block"): "fp8-block"},
    "sglang": {("sglang_torch_linear", "bfloat16"): "bf16", ("sglang_sgl_kernel_fp8_scaled_mm", "fp8"): "fp8",
               ("sglang_deepgemm_gemm_nt_f8f8bf16", "fp8_block"): "fp8-block"},
    "trtllm": {("torch_flow", "bfloat16"): "bf16", ("torch_flow", "fp8"): "fp8", ("torch_flow", "fp8_block"): "fp8-block"},
}
_ATTENTION_KERNEL = {"vllm": "vllm_flash_attn_fa3", "sglang": "fa3", "trtllm": "torch_flow"}
_ALLREDUCE_KERNEL = {"vllm": "vLLM_custom_graph", "sglang": "SGLang_CustomAllReduce_graph", "trtllm": "TRTLLM"}
_KV_DTYPES = {"bfloat16": "bf16", "float16": "bf16", "fp8": "fp8"}


def build_tables(data: Path, system: str, gpu: str, engine: str, version: str | None = None) -> KernelTables:
    """The step model's tables of GPU spec `gpu` from aiconfigurator's `system` folder below `data` (its systems/data
    directory) for `engine`: the newest version folder holding each table, or `version` where it holds one."""
    if engine not in ENGINES:
        raise HarnessError(f"engine {engine!r}: imported kernel data exists for {', '.join(ENGINES)}.")
    root = data / system
    if not root.is_dir():
        raise HarnessError(f"the kernel data has no folder {root}; this aiconfigurator version has no {gpu} measurements.")

    def path(op: str, table: str, exact: bool = True) -> Path | None:
        # the asked version only (GEMM, attention: one engine version's kernels), else the newest holding the table
        if exact and version is not None and version not in versions(data, system, op, engine, table):
            return None
        return table_path(data, system, op, engine, table, version)

    used: list[str] = []
    notes: list[str] = []

    gemm: dict[str, GridTable] = {}
    gp = path("gemm", "gemm_perf")
    if gp is not None:
        vdir = gp.parent
        df = read_table(gp, "gemm_perf", ["kernel_source", "gemm_dtype", "m", "n", "k", "latency"])
        scale = _trtllm_compute_scale(data, system, vdir.name) if engine == "trtllm" else None
        for (src, dt), fam in _GEMM_KERNELS[engine].items():
            sub = df[(df.kernel_source == src) & (df.gemm_dtype == dt)]
            if len(sub) and fam == "fp8" and scale is not None:
                sub = sub.merge(scale, on=["m", "k"], how="left")
                cs = sub.cs_latency.fillna(0.0)
                sub = sub.assign(latency=np.maximum(sub.latency - cs, 0.5 * sub.latency))
                used.append("FP8 GEMMs less the measured compute-scale time (static input scales)")
            if len(sub):
                gemm[fam] = grid_from_points(sub[["m", "n", "k"]].to_numpy(), sub.latency.to_numpy() * 1e-3, f"gemm {fam}")
        used.append(f"gemm {engine} {vdir.name}")
        if not gemm:
            notes.append(_unmapped("GEMM", engine, vdir.name, df, ["kernel_source", "gemm_dtype"],
                                   [f"{s}/{d}" for s, d in _GEMM_KERNELS[engine]]))
        tiny = df[(df.gemm_dtype == "bfloat16") & (df.m <= 4) & (df.n <= 64) & (df.k <= 64)]
        smallest = float(tiny.latency.median()) * 1e-3 if len(tiny) else None
    else:
        smallest = None
        notes.append(f"no GEMM measurements for {engine} on {gpu}")

    dec: dict[AttentionKey, GridTable] = {}
    pre: dict[AttentionKey, GridTable] = {}
    ap = path("attention", "generation_attention_perf")
    if ap is not None:
        vdir = ap.parent
        cols = ["kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
                "kv_cache_dtype", "step", "window_size", "latency"]
        for fname, target, length in (("generation_attention_perf.parquet", dec, "step"),
                                      ("context_attention_perf.parquet", pre, "isl")):
            df = read_table(vdir / fname, fname.removesuffix(".parquet"), cols)
            df = df[(df.kernel_source == _ATTENTION_KERNEL[engine]) & (df.window_size == 0) & (df.attn_dtype == "bfloat16")]
            for (h, kvh, hd, kvd), sub in df.groupby(["num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype"]):
                if kvd not in _KV_DTYPES or len(sub) < 4:
                    continue
                # the decode table's `step` is the context before the new token; its attended keys are step + 1
                lens = sub[length] + (1 if length == "step" else 0)
                xy = np.column_stack([sub.batch_size.to_numpy(), lens.to_numpy()])
                target[AttentionKey(int(h), int(kvh), int(hd), _KV_DTYPES[kvd])] = grid_from_points(
                    xy, sub.latency.to_numpy() * 1e-3, f"attention {fname}")
        used.append(f"attention {engine} {vdir.name}")
        if not dec and not pre:
            notes.append(_unmapped("attention", engine, vdir.name, read_table(ap, "generation_attention_perf", ["kernel_source"]),
                                   ["kernel_source"], [_ATTENTION_KERNEL[engine]]))
    else:
        notes.append(f"no attention measurements for {engine} on {gpu}")

    ar: dict[int, GridTable] = {}
    cp = path("comm", "custom_allreduce_perf", exact=False)
    if cp is not None:
        vdir = cp.parent
        df = read_table(cp, "custom_allreduce_perf", ["kernel_source", "allreduce_dtype", "num_gpus", "message_size", "latency"])
        df = df[df.kernel_source == _ALLREDUCE_KERNEL[engine]]
        for n, sub in df.groupby("num_gpus"):
            # message_size counts elements (the collector sizes its tensor in elements): bytes = elements × 2 (BF16)
            elem = sub.allreduce_dtype.map({"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}).fillna(2.0).to_numpy()
            ar[int(n)] = grid_from_points(sub[["message_size"]].to_numpy() * elem[:, None], sub.latency.to_numpy() * 1e-3,
                                          f"all-reduce {n} GPUs")
        used.append(f"all-reduce {engine} {vdir.name}")
    else:
        notes.append(f"no all-reduce measurements for {engine} on {gpu}")

    moe, moe_used = _moe_tables(data, system, engine, version)
    if moe_used:
        used.append(moe_used)
    mla_dec, mla_pre, mla_used = _mla_tables(data, system, engine, version)
    if mla_used:
        used.append(mla_used)

    src = f"imported kernel data: {database_name(data)} {system} ({'; '.join(used)})"
    return KernelTables(gpu, src, gemm, dec, pre, ar, moe, mla_dec, mla_pre, smallest, tuple(notes))


def _unmapped(what: str, engine: str, version: str, df, columns: list[str], wanted: list[str]) -> str:
    """The note of a table holding none of the kernels the step model reads (another GPU generation's kernels)."""
    have = sorted({"/".join(str(x) for x in row) for row in df[columns].drop_duplicates().itertuples(index=False)})
    return (f"{what} {engine} {version}: none of the kernels read here ({', '.join(wanted)}) in the table (it has "
            f"{', '.join(have[:6])}); no {what} grid")


# the fused-MoE kernel each engine runs per expert dtype (first present wins), and our dtype names for aiconfigurator's
_MOE_KERNELS = {
    "vllm": ("vllm_fp8moe_triton_tritonexperts", "vllm_unquantizedfusedmoe_triton_tritonexperts",
             "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
             "vllm_fused_moe", "vllm_marlin_int4_moe", "vllm_mxfp4_moe"),
    "sglang": ("sglang_fused_moe_triton", "sglang_marlin_moe", "sglang_flashinfer_cutlass_moe"),
    "trtllm": ("moe_torch_flow", "moe_torch_flow_cutlass"),
}
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "int4_wo": "int4-wo", "w4a16_mxfp4": "mxfp4"}


def _moe_tables(data: Path, system: str, engine: str, version: str | None):
    """MoE tables of every version folder, newest first: a shape only an older version measured is taken from it."""
    folder = data / system / "moe" / engine
    vdirs = [folder / v for v in versions(data, system, "moe", engine, "moe_perf")]
    if version is not None:
        vdirs = [p for p in vdirs if p.name == version] or vdirs
    out: dict[MoeKey, GridTable] = {}
    names = []
    for vdir in vdirs:
        got = _moe_version(vdir, engine)
        new = {k: v for k, v in got.items() if k not in out}
        if new:
            out.update(new)
            names.append(vdir.name)
    return out, f"MoE {engine} {', '.join(names)} (balanced routing)" if out else ""


def _moe_version(vdir: Path, engine: str) -> dict[MoeKey, GridTable]:
    df = read_table(vdir / "moe_perf.parquet", "moe_perf", ["kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                                           "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"])
    df = df[(df.distribution == "balanced") & df.moe_dtype.isin(list(MOE_DTYPES))]
    rank = {k: i for i, k in enumerate(_MOE_KERNELS[engine])}
    df = df[df.kernel_source.isin(list(rank))].assign(rank=lambda x: x.kernel_source.map(rank))
    out = {}
    keys = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    for k, sub in df.groupby(keys):
        sub = sub[sub["rank"] == sub["rank"].min()]
        if len(sub) < 2:
            continue
        key = MoeKey(MOE_DTYPES[k[0]], *(int(x) for x in k[1:]))
        out[key] = grid_from_points(sub[["num_tokens"]].to_numpy(), sub.latency.to_numpy() * 1e-3, f"moe {key}")
    return out


def _mla_tables(data: Path, system: str, engine: str, version: str | None):
    have = versions(data, system, "mla", engine, "generation_mla_perf")
    if version is not None:  # the asked version, else the newest older one holding the table
        have = [v for v in have if version_key(v) <= version_key(version)]
    if not have:
        return {}, {}, ""
    vdir = data / system / "mla" / engine / have[0]
    tables: list[dict[int, GridTable]] = []
    for fname, length in (("generation_mla_perf.parquet", "step"), ("context_mla_perf.parquet", "isl")):
        df = read_table(vdir / fname, fname.removesuffix(".parquet"), ["num_heads", "batch_size", "isl", "tp_size", "step", "kv_cache_dtype", "latency"])
        df = df[(df.tp_size == 1) & (df.kv_cache_dtype == "bfloat16")]
        out = {}
        for h, sub in df.groupby("num_heads"):
            lens = sub[length] + (1 if length == "step" else 0)
            out[int(h)] = grid_from_points(np.column_stack([sub.batch_size.to_numpy(), lens.to_numpy()]),
                                           sub.latency.to_numpy() * 1e-3, f"mla {fname} {h} heads")
        tables.append(out)
    return tables[0], tables[1], f"MLA {engine} {vdir.name}"


def _trtllm_compute_scale(data: Path, system: str, version: str):
    """TensorRT-LLM's measured dynamic-scale overhead by (M, K), as a frame with columns m, k, cs_latency (ms)."""
    p = table_path(data, system, "quantize", "trtllm", "computescale_perf", version)
    if p is None:
        return None
    df = read_table(p, "computescale_perf", ["m", "k", "quant_dtype", "latency"])
    df = df[df.quant_dtype == "fp8"].groupby(["m", "k"], as_index=False).latency.median()
    return df.rename(columns={"latency": "cs_latency"})


