"""Imported kernel data: aiconfigurator's per-operation measurements read as the step model's interpolation tables.

The `aiconfigurator` package (PyPI; its `aiconfigurator-core` wheel) ships per-operation latencies measured on
each GPU, by engine and engine version: `aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/*.parquet`.
This module reads the four the step model uses, from the installed package (or a folder given), never from a
network, and builds harness.model.kernel_tables.KernelTables:

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

The newest version folder of each op is used unless a version is asked for (the kernels of one engine change little
between the versions the tables hold; which version each table came from is in `KernelTables.source`). Latencies
are stored in milliseconds and converted to seconds here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from harness.errors import HarnessError
from harness.model.kernel_tables import AttentionKey, GridTable, KernelTables, MoeKey, grid_from_points

ENGINES = ("vllm", "sglang", "trtllm")

# our GPU spec name -> aiconfigurator's system name (only parts whose datasheet is the same product)
AIC_SYSTEMS = {"h200-sxm": "h200_sxm", "h100-sxm": "h100_sxm", "a100-80gb-sxm": "a100_sxm", "b200": "b200_sxm"}

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


def aic_data_root(path: str | Path | None = None) -> Path:
    """The folder of aiconfigurator's per-system data: `path`, else the installed aiconfigurator-core package's."""
    if path is not None:
        p = Path(path)
        if not p.is_dir():
            raise HarnessError(f"kernel data folder {str(p)!r} does not exist; give aiconfigurator_core/systems/data or "
                               "install the package: pip install 'aiconfigurator==0.12.0'.")
        return p
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise HarnessError("imported kernel data needs the aiconfigurator package (its aiconfigurator-core wheel holds the "
                           "measurements): pip install 'aiconfigurator==0.12.0', or give --kernel-data PATH.")
    return Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"


def aic_system(gpu: str) -> str:
    try:
        return AIC_SYSTEMS[gpu]
    except KeyError:
        raise HarnessError(f"no imported kernel data maps to GPU {gpu!r}; aiconfigurator's systems are known for "
                           f"{', '.join(AIC_SYSTEMS)}. Use the calibration database or the datasheet instead.") from None


def _version_key(v: str) -> tuple:
    return tuple((0, int(x)) if x.isdigit() else (1, x) for x in re.split(r"[.\-]", v))


def _newest(folder: Path, version: str | None) -> Path | None:
    if not folder.is_dir():
        return None
    vs = sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))),
                key=lambda p: _version_key(p.name))
    if version is not None:
        exact = [p for p in vs if p.name == version]
        return exact[0] if exact else None
    return vs[-1] if vs else None


def _read(path: Path, columns: list[str]):
    import pandas as pd  # noqa: PLC0415 - pandas only when kernel data is read

    try:
        return pd.read_parquet(path, columns=columns)
    except (OSError, ValueError, KeyError) as exc:
        raise HarnessError(f"kernel data {path} cannot be read ({exc}); reinstall aiconfigurator or give another folder.") from None


CACHE_FORMAT = 1  # bump when the tables built here change


def _cache_file(root: Path, gpu: str, engine: str, version: str | None) -> Path | None:
    """Where built tables are kept between runs: $XDG_CACHE_HOME (or ~/.cache)/llm-dist-harness/kernel-tables/, named by
    the data folder's identity (path, modification time) so new data is never read from an old cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    try:
        stamp = f"{root.resolve()}|{root.stat().st_mtime_ns}|{gpu}|{engine}|{version}|{CACHE_FORMAT}|{_package_version()}"
    except OSError:
        return None
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return Path(base) / "llm-dist-harness" / "kernel-tables" / f"{gpu}-{engine}-{digest}.pickle"


@lru_cache(maxsize=16)
def load_aic_tables(gpu: str, engine: str, version: str | None = None, data_root: str | None = None) -> KernelTables:
    """The step model's tables for `gpu` and `engine` from aiconfigurator's kernel data (newest version folders); built
    once and cached on disk (a derived copy, rebuilt when the data folder changes)."""
    root = aic_data_root(data_root) / aic_system(gpu)
    cache = _cache_file(root, gpu, engine, version) if root.is_dir() else None
    if cache is not None and cache.is_file():
        try:
            with open(cache, "rb") as f:
                got = pickle.load(f)
            if isinstance(got, KernelTables):
                return got
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            pass  # a stale or damaged cache is rebuilt below
    tables = _build_tables(gpu, engine, version, data_root)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                pickle.dump(tables, f, protocol=pickle.HIGHEST_PROTOCOL)
            tmp.replace(cache)
        except OSError:
            pass  # no cache: the next run builds the tables again
    return tables


def _build_tables(gpu: str, engine: str, version: str | None, data_root: str | None) -> KernelTables:
    if engine not in ENGINES:
        raise HarnessError(f"engine {engine!r}: imported kernel data exists for {', '.join(ENGINES)}.")
    root = aic_data_root(data_root) / aic_system(gpu)
    if not root.is_dir():
        raise HarnessError(f"the kernel data has no folder {root}; this aiconfigurator version has no {gpu} measurements.")
    used: list[str] = []
    notes: list[str] = []

    gemm: dict[str, GridTable] = {}
    vdir = _newest(root / "gemm" / engine, version)
    if vdir is not None:
        df = _read(vdir / "gemm_perf.parquet", ["kernel_source", "gemm_dtype", "m", "n", "k", "latency"])
        scale = _trtllm_compute_scale(root, vdir.name) if engine == "trtllm" else None
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
        tiny = df[(df.gemm_dtype == "bfloat16") & (df.m <= 4) & (df.n <= 64) & (df.k <= 64)]
        smallest = float(tiny.latency.median()) * 1e-3 if len(tiny) else None
    else:
        smallest = None
        notes.append(f"no GEMM measurements for {engine} on {gpu}")

    dec: dict[AttentionKey, GridTable] = {}
    pre: dict[AttentionKey, GridTable] = {}
    vdir = _newest(root / "attention" / engine, version)
    if vdir is not None:
        cols = ["kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
                "kv_cache_dtype", "step", "window_size", "latency"]
        for fname, target, length in (("generation_attention_perf.parquet", dec, "step"),
                                      ("context_attention_perf.parquet", pre, "isl")):
            df = _read(vdir / fname, cols)
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
    else:
        notes.append(f"no attention measurements for {engine} on {gpu}")

    ar: dict[int, GridTable] = {}
    vdir = _newest(root / "comm" / engine, None if version is None else version)
    if vdir is None or not (vdir / "custom_allreduce_perf.parquet").is_file():
        cands = [p for p in sorted((root / "comm" / engine).glob("*/custom_allreduce_perf.parquet"),
                                   key=lambda p: _version_key(p.parent.name))] if (root / "comm" / engine).is_dir() else []
        vdir = cands[-1].parent if cands else None
    if vdir is not None:
        df = _read(vdir / "custom_allreduce_perf.parquet", ["kernel_source", "allreduce_dtype", "num_gpus", "message_size", "latency"])
        df = df[df.kernel_source == _ALLREDUCE_KERNEL[engine]]
        for n, sub in df.groupby("num_gpus"):
            # message_size counts elements (the collector sizes its tensor in elements): bytes = elements × 2 (BF16)
            elem = sub.allreduce_dtype.map({"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}).fillna(2.0).to_numpy()
            ar[int(n)] = grid_from_points(sub[["message_size"]].to_numpy() * elem[:, None], sub.latency.to_numpy() * 1e-3,
                                          f"all-reduce {n} GPUs")
        used.append(f"all-reduce {engine} {vdir.name}")
    else:
        notes.append(f"no all-reduce measurements for {engine} on {gpu}")

    moe, moe_used = _moe_tables(root, engine, version)
    if moe_used:
        used.append(moe_used)
    mla_dec, mla_pre, mla_used = _mla_tables(root, engine, version)
    if mla_used:
        used.append(mla_used)

    version_of_pkg = _package_version()
    src = (f"imported kernel data: aiconfigurator {version_of_pkg} {aic_system(gpu)} ({'; '.join(used)})")
    return KernelTables(gpu, src, gemm, dec, pre, ar, moe, mla_dec, mla_pre, smallest, tuple(notes))


# the fused-MoE kernel each engine runs per expert dtype (first present wins), and our dtype names for aiconfigurator's
_MOE_KERNELS = {
    "vllm": ("vllm_fp8moe_triton_tritonexperts", "vllm_unquantizedfusedmoe_triton_tritonexperts",
             "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
             "vllm_fused_moe", "vllm_marlin_int4_moe", "vllm_mxfp4_moe"),
    "sglang": ("sglang_fused_moe_triton", "sglang_marlin_moe", "sglang_flashinfer_cutlass_moe"),
    "trtllm": ("moe_torch_flow", "moe_torch_flow_cutlass"),
}
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "int4_wo": "int4-wo", "w4a16_mxfp4": "mxfp4"}


def _moe_tables(root: Path, engine: str, version: str | None):
    """MoE tables of every version folder, newest first: a shape only an older version measured is taken from it."""
    folder = root / "moe" / engine
    if not folder.is_dir():
        return {}, ""
    vdirs = sorted((p for p in folder.iterdir() if (p / "moe_perf.parquet").is_file()), key=lambda p: _version_key(p.name),
                   reverse=True)
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
    df = _read(vdir / "moe_perf.parquet", ["kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
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


def _mla_tables(root: Path, engine: str, version: str | None):
    vdir = _newest(root / "mla" / engine, version)
    while vdir is not None and not (vdir / "generation_mla_perf.parquet").is_file():
        older = [p for p in (root / "mla" / engine).iterdir() if p.is_dir() and _version_key(p.name) < _version_key(vdir.name)]
        vdir = max(older, key=lambda p: _version_key(p.name)) if older else None
    if vdir is None:
        return {}, {}, ""
    tables: list[dict[int, GridTable]] = []
    for fname, length in (("generation_mla_perf.parquet", "step"), ("context_mla_perf.parquet", "isl")):
        df = _read(vdir / fname, ["num_heads", "batch_size", "isl", "tp_size", "step", "kv_cache_dtype", "latency"])
        df = df[(df.tp_size == 1) & (df.kv_cache_dtype == "bfloat16")]
        out = {}
        for h, sub in df.groupby("num_heads"):
            lens = sub[length] + (1 if length == "step" else 0)
            out[int(h)] = grid_from_points(np.column_stack([sub.batch_size.to_numpy(), lens.to_numpy()]),
                                           sub.latency.to_numpy() * 1e-3, f"mla {fname} {h} heads")
        tables.append(out)
    return tables[0], tables[1], f"MLA {engine} {vdir.name}"


def _trtllm_compute_scale(root: Path, version: str):
    """TensorRT-LLM's measured dynamic-scale overhead by (M, K), as a frame with columns m, k, cs_latency (ms)."""
    vdir = _newest(root / "quantize" / "trtllm", version) or _newest(root / "quantize" / "trtllm", None)
    if vdir is None or not (vdir / "computescale_perf.parquet").is_file():
        return None
    df = _read(vdir / "computescale_perf.parquet", ["m", "k", "quant_dtype", "latency"])
    df = df[df.quant_dtype == "fp8"].groupby(["m", "k"], as_index=False).latency.median()
    return df.rename(columns={"latency": "cs_latency"})


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    for name in ("aiconfigurator-core", "aiconfigurator"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "(version unknown)"
