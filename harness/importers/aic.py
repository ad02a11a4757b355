"""aiconfigurator's kernel database -> micro runs of kernel family aic-<engine>-<version>, one run per GPU and engine.

The `aiconfigurator-core` wheel (PyPI; `pip install -e .[aic]`) ships per-operation measurements under
`aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/*.parquet`; this module reads them
from the installed package or a path (never from the repository: the data is not committed) and files
them as runs of kind "import" with the tables a `harness micro run` writes, so `harness calibrate`
fits our constants from them for GPUs we cannot lease.

What is read (the schema as the 0.12.0 wheel writes it; every required column is checked, a table
without one is refused naming it). `latency` is in milliseconds (aiconfigurator's `log_perf`: the mean
of its timed runs after warm-up, CUDA events; no raw samples and no L2 flush are recorded):

- gemm/<engine>/<v>/gemm_perf.parquet: gemm_dtype, m, n, k, kernel_source -> suite "kernel",
  KernelGemmParams; FLOPs 2·m·n·k, bytes m·k·a + k·n·w + m·n·o (element sizes of the dtype);
- attention/<engine>/<v>/{context,generation}_attention_perf.parquet: batch_size, isl, step,
  num_heads, num_key_value_heads, head_dim, kv_cache_dtype, window_size (absent = 0) ->
  KernelAttentionParams. Generation: one new token attending step + isl keys (aiconfigurator's
  collector writes isl = 1 and step = the cached length); bytes are the KV read
  b·keys·2·kv_heads·head_dim·kv_bytes, FLOPs 4·b·heads·keys·head_dim (V is counted at the K head dim:
  rows of head dim 192, an MLA-style K whose V is 128 wide, may then read above the HBM peak and are
  flagged). Context: causal, FLOPs
  4·b·heads·head_dim·(query-key pairs) with the window honoured; bytes Q, K, V, O once;
- moe/<engine>/<v>/moe_perf.parquet: num_tokens, hidden_size, inter_size, topk, num_experts,
  moe_tp_size, moe_ep_size, distribution, moe_dtype -> KernelMoeParams; FLOPs per GPU
  2·3·hidden·(inter/tp)·tokens·topk/ep (gated MLP, the average GPU's share; 2 matrices, not 3, for a kernel
  source named non-gated); bytes not counted;
- comm/nccl/<v>/nccl_perf.parquet (op_name, nccl_dtype, num_gpus, message_size) and
  comm/<engine>/<v>/custom_allreduce_perf.parquet (allreduce_dtype, num_gpus, message_size, backend
  or implementation) -> suite "comm", CollectiveParams. `message_size` is an element count
  (collect_nccl.py stores bytes // bytes_per_element; the custom all-reduce collector sizes its
  tensor in elements), so size_bytes = message_size · element bytes.

Beside the cases, each run holds `kernel_tables.json`: the step model's interpolation tables built from the same files
(harness.importers.aic_grids; the newest version folder holding each table, or ENGINE@VERSION's), which `harness
calibrate --into-db` files into the database entry, so `harness predict`'s default calibration reads the same kernels as
`--calibration aic`. Every parquet file is read through harness.importers.aic_files (the one reader).

Per engine, the newest version that holds both GEMM and attention tables is read (`ENGINE@VERSION`
picks another), with the engine's all-reduce, MoE and the system's NCCL version (its YAML's
`misc.nccl_version`, else the newest). Every case is judged against our GPU spec's peak (the device
name the rows carry -> harness/specs/device_names.py); a rate above it is flagged and marked invalid,
never fitted (microbench.case.derive). A GPU without a spec is refused with the fix.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from harness.errors import HarnessError
from harness.importers.aic_files import REQUIRED, data_root, database_name, read_table, systems, version_key, versions

TOOL = "aiconfigurator"
ENGINES = ("trtllm", "vllm", "sglang")
SUITE_KERNEL = "kernel"
SUITE_COMM = "comm"
TIMER = "external:aiconfigurator (mean of its timed runs, CUDA events)"
CACHE_STATE = "as aiconfigurator ran it: no L2 flush recorded"
# dtype names as aiconfigurator writes them -> ours; element bytes (activation, weight, output) for the byte count
DTYPES: dict[str, tuple[str, float, float, float]] = {
    "bfloat16": ("bf16", 2, 2, 2), "float16": ("fp16", 2, 2, 2), "half": ("fp16", 2, 2, 2),
    "fp8": ("fp8", 1, 1, 2), "fp8_block": ("fp8_block", 1, 1, 2), "int8": ("int8", 1, 1, 1),
    "int8_wo": ("int8_wo", 2, 1, 2), "int4_wo": ("int4_wo", 2, 0.5, 2), "sq": ("sq", 1, 1, 2),
    "w4a16_mxfp4": ("w4a16_mxfp4", 2, 0.5, 2), "nvfp4": ("nvfp4", 0.5, 0.5, 2), "w4afp8": ("w4afp8", 1, 0.5, 2),
}
# the dense peak each of our dtypes is judged against (harness.specs.gpus.GpuSpec.peak_flops_per_s)
PEAK_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8", "int8_wo": "bf16", "int4_wo": "bf16",
              "w4a16_mxfp4": "bf16"}
# NVLink generation of the SXM systems aiconfigurator measured (harness/specs/links.py): the per-direction peak a
# collective's algorithm bandwidth is judged against
NVLINK_OF = {"a100-80gb-sxm": "nvlink-a100", "a100-40gb-sxm": "nvlink-a100", "h100-sxm": "nvlink-h100",
             "h200-sxm": "nvlink-h100"}

_REQUIRED = REQUIRED  # the columns each table must have (harness.importers.aic_files)
_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


# ---------------------------------------------------------------- where the data is


@dataclass(frozen=True)
class Selection:
    """The tables read for one system and engine (one kernel family)."""

    system: str
    engine: str
    version: str
    tables: dict[str, Path]  # table name -> parquet file
    notes: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        from harness.calibration.family import aic_family

        return aic_family(self.engine, self.version)


def _system_yaml(root: Path, system: str) -> dict[str, Any]:
    p = root.parent / f"{system}.yaml"
    if not p.is_file():
        return {}
    d = _yaml(p)
    return d if isinstance(d, dict) else {}


def _yaml(p: Path) -> Any:
    """A small YAML file of the database (PyYAML is aiconfigurator-core's dependency; without it, nothing is read)."""
    try:
        import yaml
    except ImportError:
        return None
    try:
        return yaml.safe_load(p.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return None


def select(root: Path, system: str, engine: str, version: str | None = None) -> Selection | None:
    """The tables of `engine` on `system`: the newest version with GEMM and attention tables (or `version`)."""
    gemm = versions(root, system, "gemm", engine, "gemm_perf")
    attn = versions(root, system, "attention", engine, "generation_attention_perf")
    notes: list[str] = []
    if version is None:
        both = [v for v in gemm if v in attn]
        if both:
            version = both[0]
        elif gemm or attn:
            version = (gemm or attn)[0]
            notes.append(f"{engine} has GEMM versions {gemm or 'none'} and attention versions {attn or 'none'} on "
                         f"{system}, none in common; {version} read")
        else:
            return None
    elif version not in gemm and version not in attn:
        have = sorted(set(gemm) | set(attn), key=version_key, reverse=True)
        raise HarnessError(f"aiconfigurator import: {engine} {version} has no GEMM or attention table on {system}; "
                           f"it has {', '.join(have) or 'none'}.")
    files: dict[str, Path] = {}  # aiconfigurator's table name -> its parquet file
    for op, table in (("gemm", "gemm_perf"), ("attention", "context_attention_perf"),
                      ("attention", "generation_attention_perf"), ("moe", "moe_perf"),
                      ("comm", "custom_allreduce_perf")):
        vs = versions(root, system, op, engine, table)
        if not vs:
            continue
        use = version if version in vs else vs[0]
        if use != version:
            notes.append(f"{table}: {engine} {version} has none on {system}; {engine} {use} read")
        files[table] = root / system / op / engine / use / f"{table}.parquet"
    nccl = versions(root, system, "comm", "nccl", "nccl_perf")
    if nccl:
        want = str((_system_yaml(root, system).get("misc") or {}).get("nccl_version") or "")
        use = want if want in nccl else nccl[0]
        files["nccl_perf"] = root / system / "comm" / "nccl" / use / "nccl_perf.parquet"
    return Selection(system, engine, version, files, tuple(notes))


# ---------------------------------------------------------------- reading the tables


def _read(path: Path, table: str):
    df = read_table(path, table)
    lat = df["latency"].astype(float)
    bad = ~(np.isfinite(lat) & (lat > 0))
    return df, bad


def _collapse(df):
    """Rows measuring the same shape twice (aiconfigurator's NCCL tables hold every size twice) as one case: its
    latency the median of the repeats, each repeat kept as a raw sample (`_samples_ms`)."""
    keys = [c for c in df.columns if c not in ("latency", "power", "power_limit")]
    if not df.duplicated(keys).any():
        return df.assign(_samples_ms=None), 0
    g = df.groupby(keys, sort=False, dropna=False)["latency"]
    out = g.median().reset_index()
    out["_samples_ms"] = list(g.apply(list).to_numpy())
    return out, len(df) - len(out)


def _dtype(raw: Any) -> tuple[str, float, float, float]:
    got = DTYPES.get(str(raw))
    if got is None:  # an unknown type is kept by its own name, with no element sizes and no peak
        return (_SAFE.sub("_", str(raw)), math.nan, math.nan, math.nan)
    return got


@dataclass
class Imported:
    """One family's cases as the micro_cases table (a DataFrame), with its skips and facts."""

    selection: Selection
    gpu_name: str
    cases: Any = None  # pandas DataFrame in harness.records.TABLE_COLUMNS["micro_cases"] layout
    skips: list[dict[str, str]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # table -> rows filed
    flagged: dict[str, int] = field(default_factory=dict)  # table -> rows above the spec peak
    samples: list[dict[str, Any]] = field(default_factory=list)  # micro_samples rows of cases measured more than once


def _peaks(gpu_spec: Any, dtypes: Any) -> np.ndarray:
    return np.array([gpu_spec.peak_flops_per_s(PEAK_DTYPE.get(d, "")) or math.nan if PEAK_DTYPE.get(d) else math.nan
                     for d in dtypes], dtype=float)


def _json_rows(fields: dict[str, Any], n: int) -> list[str]:
    """One JSON object per row from columns of ints and strings (a str: a value constant over the table), keys sorted as
    json.dumps(sort_keys=True) writes them; built column-wise, since a json.dumps per row is most of an import's time."""
    import pandas as pd

    out = pd.Series(["{"] * n, dtype=object)
    for i, key in enumerate(sorted(fields)):
        head = ("" if i == 0 else ", ") + f"{json.dumps(key)}: "
        col = fields[key]
        if isinstance(col, str):
            out = out + (head + json.dumps(col))
            continue
        c = pd.Series(np.asarray(col))
        if c.dtype.kind in "iu":
            vals = c.astype(str).astype(object)
        else:
            vals = c.map({u: json.dumps(str(u)) for u in c.unique()}).astype(object)
        out = out + head + vals
    return list(out + "}")


def _rows(suite: str, cases: list[str], backend: str, dtype: Any, params: dict[str, Any], median_s: np.ndarray,
          flops: np.ndarray, nbytes: np.ndarray, peak_flops: np.ndarray, peak_bytes: np.ndarray, peak_source: str,
          samples: Any):
    """`params`: the params record's fields as columns (a str for a field constant over the table)."""
    """The micro_cases rows of one table, derived as microbench.case.derive does (above-peak flagged, invalid)."""
    import pandas as pd

    n = len(cases)
    with np.errstate(divide="ignore", invalid="ignore"):
        fps = np.where(flops > 0, flops / median_s, np.nan)
        bps = np.where(nbytes > 0, nbytes / median_s, np.nan)
        mfu = fps / peak_flops
        mbu = bps / peak_bytes
    over_f = np.nan_to_num(mfu) > 1.0
    over_b = np.nan_to_num(mbu) > 1.0
    flags = []
    for f_over, b_over, a, b in zip(over_f, over_b, mfu, mbu):
        fl = []
        if f_over:
            fl.append(f"above_peak: FLOP/s executed = {a:.0%} of the spec peak; a measurement error or a wrong spec peak; "
                      "case marked invalid")
        if b_over:
            fl.append(f"above_peak: bytes/s executed = {b:.0%} of the spec peak; a measurement error (an L2-resident "
                      "operand, a mislabelled shape) or a wrong spec peak; case marked invalid")
        flags.append(json.dumps(fl) if fl else "[]")
    nan = np.full(n, np.nan)
    counts = np.array([1 if x is None else len(x) for x in samples], dtype=int)
    cv = np.array([np.nan if x is None or len(x) < 2 else float(np.std(x) / np.mean(x)) for x in samples])
    lows = np.array([np.nan if x is None else float(min(x)) * 1e-3 for x in samples])
    return pd.DataFrame({
        "case_id": [f"{suite}:{c}:{backend}:cuda:0:{d}" for c, d in zip(cases, dtype)], "suite": suite, "case": cases,
        "backend": backend, "device": "cuda:0", "dtype": list(dtype),
        "params_json": _json_rows(params, n), "n_samples": counts,
        "inner_reps": np.ones(n, dtype=int), "median_s": median_s, "p10_s": nan, "p90_s": nan, "mean_s": median_s,
        "min_s": lows, "cv": cv, "useful_flops": flops, "padded_flops": flops, "useful_bytes": nbytes,
        "padded_bytes": nbytes, "flops_per_s": fps, "bytes_per_s": bps, "mfu": mfu, "mbu": mbu,
        "peak_flops_per_s": peak_flops, "peak_bytes_per_s": peak_bytes, "peak_source": peak_source, "timer": TIMER,
        "cache_state": CACHE_STATE, "unstable": np.zeros(n, dtype=bool), "valid": ~(over_f | over_b),
        "flags_json": flags, "source": TOOL, "sm_clock_hz": nan, "mem_clock_hz": nan,
    })


def _device(df, path: Path, want: str | None) -> str:
    devs = sorted({str(x) for x in df["device"].unique()}) if "device" in df.columns else []
    if len(devs) > 1:
        raise HarnessError(f"aiconfigurator import: {path} mixes devices {devs}; one table is one GPU's.")
    if want and devs and devs[0] != want:
        raise HarnessError(f"aiconfigurator import: {path} was measured on {devs[0]!r}, the system's other tables on "
                           f"{want!r}; the data is inconsistent — reinstall aiconfigurator-core.")
    return devs[0] if devs else (want or "")


def _gemm(df, sel: Selection, spec: Any, peak_src: str):
    family = sel.family
    d = [_dtype(x) for x in df["gemm_dtype"]]
    dt = [x[0] for x in d]
    a, w, o = (np.array([x[i] for x in d], dtype=float) for i in (1, 2, 3))
    m, n, k = (df[c].astype(np.int64).to_numpy() for c in ("m", "n", "k"))
    ks = df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df.columns else np.full(len(df), "")
    flops = 2.0 * m * n * k
    nbytes = np.nan_to_num(m * k * a + k * n * w + m * n * o)
    params = {"params_record": "kernel.gemm/1", "m": m, "n": n, "k": k, "kernel_source": ks}
    cases = [f"gemm-m{mi}-n{ni}-k{ki}-{_SAFE.sub('_', s)}" for mi, ni, ki, s in zip(m, n, k, ks)]
    return _rows(SUITE_KERNEL, cases, family, dt, params, df["latency"].astype(float).to_numpy() * 1e-3, flops, nbytes,
                 _peaks(spec, dt), np.full(len(df), spec.hbm_bandwidth_bytes_per_s), peak_src, df["_samples_ms"])


def _attention(df, sel: Selection, spec: Any, peak_src: str, phase: str):
    family = sel.family
    b, isl, step, h, kvh, hd = (df[c].astype(np.int64).to_numpy() for c in
                                ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim"))
    win = df["window_size"].astype(np.int64).to_numpy() if "window_size" in df.columns else np.zeros(len(df), np.int64)
    kvd = [_dtype(x)[0] for x in df["kv_cache_dtype"]]
    kvb = np.array([1.0 if x == "fp8" else 2.0 for x in kvd])
    ctx = step + isl  # keys each new token attends: the cached ones and its own
    ks = df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df.columns else np.full(len(df), "")
    if phase == "generation":
        keys = np.where((win > 0) & (win < ctx), win, ctx).astype(float)
        flops = 4.0 * b * h * keys * hd
        nbytes = b * keys * 2.0 * kvh * hd * kvb + b * h * hd * 2.0 * 2.0
    else:  # causal: query i (of isl, after `step` cached keys) attends step + i + 1 keys, at most the window
        s = isl.astype(float)
        full = s * step + s * (s + 1) / 2
        w = win.astype(float)
        windowed = np.where(s <= w, s * (s + 1) / 2, w * (w + 1) / 2 + (s - w) * w)
        pairs = np.where((win > 0) & (step == 0), windowed, full)
        flops = 4.0 * b * h * hd * pairs
        nbytes = b * s * hd * (2.0 * h * 2.0 + 2.0 * kvh * kvb)
    params = {"params_record": "kernel.attention/1", "phase": phase, "batch": b, "query_tokens": isl,
              "context_tokens": ctx, "num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "kv_dtype": kvd,
              "window_tokens": win, "kernel_source": ks}
    cases = [f"{phase}_attention-b{bi}-q{qi}-c{ci}-h{hi}-kv{ki}-d{di}-{kd}-w{wi}-{_SAFE.sub('_', si)}"
             for bi, qi, ci, hi, ki, di, kd, wi, si in zip(b, isl, ctx, h, kvh, hd, kvd, win, ks)]
    # attention runs at the activation type (bf16: the collectors' attn_dtype) against the bf16 peak
    dt = [str(x) for x in (df["attn_dtype"] if "attn_dtype" in df.columns else ["bfloat16"] * len(df))]
    dt = [_dtype(x)[0] for x in dt]
    return _rows(SUITE_KERNEL, cases, family, dt, params, df["latency"].astype(float).to_numpy() * 1e-3, flops, nbytes,
                 _peaks(spec, dt), np.full(len(df), spec.hbm_bandwidth_bytes_per_s), peak_src, df["_samples_ms"])


def _moe(df, sel: Selection, spec: Any, peak_src: str):
    family = sel.family
    t, hid, inter, topk, ne, tp, ep = (df[c].astype(np.int64).to_numpy() for c in
                                       ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                                        "moe_ep_size"))
    dist = df["distribution"].astype(str).to_numpy()
    dt = [_dtype(x)[0] for x in df["moe_dtype"]]
    ks = df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df.columns else np.full(len(df), "")
    # a gated MLP (gate, up, down) multiplies three matrices; a kernel named non-gated (gpt-oss style, "nongated") two
    mats = np.array([2.0 if "nongated" in s.lower() else 3.0 for s in ks])
    flops = 2.0 * mats * hid * (inter / tp) * t * topk / ep
    params = {"params_record": "kernel.moe/1", "tokens": t, "hidden": hid, "inter": inter, "topk": topk, "num_experts": ne,
              "tp": tp, "ep": ep, "distribution": dist, "kernel_source": ks}
    cases = [f"moe-t{a}-h{b}-i{c}-k{d}-e{e}-tp{f}-ep{g}-{_SAFE.sub('_', h)}-{_SAFE.sub('_', i)}"
             for a, b, c, d, e, f, g, h, i in zip(t, hid, inter, topk, ne, tp, ep, dist, ks)]
    return _rows(SUITE_KERNEL, cases, family, dt, params, df["latency"].astype(float).to_numpy() * 1e-3, flops,
                 np.zeros(len(df)), _peaks(spec, dt), np.full(len(df), spec.hbm_bandwidth_bytes_per_s), peak_src,
                 df["_samples_ms"])


def _comm(df, sel: Selection, table: str, gpu: str):
    from harness.specs.links import LINKS

    family = sel.family
    n = df["num_gpus"].astype(np.int64).to_numpy()
    elems = df["message_size"].astype(np.int64).to_numpy()
    if table == "nccl_perf":
        ops = df["op_name"].astype(str).to_numpy()
        raw_dt = df["nccl_dtype"]
        impl = np.full(len(df), "nccl")
    else:
        ops = df["op_name"].astype(str).to_numpy() if "op_name" in df.columns else np.full(len(df), "all_reduce")
        raw_dt = df["allreduce_dtype"]
        col = "backend" if "backend" in df.columns else ("implementation" if "implementation" in df.columns else
                                                         "kernel_source")
        impl = np.array([_SAFE.sub("_", str(x)).lower() for x in df[col]]) if col in df.columns else np.full(
            len(df), sel.engine)
    d = [_dtype(x) for x in raw_dt]
    dt = [x[0] for x in d]
    eb = np.array([x[1] for x in d], dtype=float)
    size = (elems * eb)
    link = LINKS.get(NVLINK_OF.get(gpu, ""))
    if link is not None:
        # algorithm bandwidth S/t against the link's per-direction peak; a gather or scatter moves (n-1)/n of S per GPU
        peak = np.where(ops == "all_reduce", link.bandwidth_bytes_per_s, link.bandwidth_bytes_per_s * n / np.maximum(n - 1, 1))
        src = f"{link.name}: {link.bandwidth_bytes_per_s / 1e9:g} GB/s per direction ({link.source})"
    else:
        peak = np.full(len(df), np.nan)
        src = f"no NVLink spec for {gpu} in harness/specs/links.py: collectives not judged against a peak"
    params = {"params_record": "comm.collective/1", "op": ops, "num_gpus": n, "size_bytes": size.astype(np.int64),
              "implementation": impl, "message_elements": elems}
    cases = [f"{o}-n{g}-s{int(s)}-{i}" for o, g, s, i in zip(ops, n, size, impl)]
    return _rows(SUITE_COMM, cases, family, dt, params, df["latency"].astype(float).to_numpy() * 1e-3,
                 np.zeros(len(df)), np.nan_to_num(size), np.full(len(df), np.nan), peak, src, df["_samples_ms"])


def read_selection(sel: Selection) -> Imported:
    """Every table of `sel` as micro_cases rows, judged against our spec of the GPU the rows name."""
    import pandas as pd

    from harness.specs.device_names import spec_name_for_device
    from harness.specs.gpus import GPUS

    device = ""
    frames, skips, counts, flagged = [], [], {}, {}
    facts: dict[str, Any] = {}
    samples: list[dict[str, Any]] = []
    spec = None
    order = ["gemm_perf", "generation_attention_perf", "context_attention_perf", "moe_perf", "custom_allreduce_perf",
             "nccl_perf"]
    for table in [t for t in order if t in sel.tables]:
        path = sel.tables[table]
        df, bad = _read(path, table)
        if bad.any():
            skips.append({"suite": table, "case": f"{int(bad.sum())} row(s)",
                          "reason": "latency missing, zero or negative: no rate to derive"})
            df = df[~bad.to_numpy()]
        if "device" in df.columns:
            device = _device(df, path, device or None)
        df, repeats = _collapse(df)
        if repeats:
            facts.setdefault("repeats", {})[table] = (f"{repeats} row(s) repeat a shape measured in the same table: kept as "
                                                      "raw samples of one case, whose latency is their median")
        if spec is None:
            name = spec_name_for_device(device)
            if name is None:
                raise HarnessError(f"aiconfigurator import: {sel.system} was measured on {device!r}, which has no GPU spec "
                                   "here; add its datasheet peaks to harness/specs/gpus.py and its exact name to "
                                   "harness/specs/device_names.py, then import it again.")
            spec = GPUS[name]
        if table == "nccl_perf" and "version" in df.columns:
            facts["nccl_versions_in_rows"] = sorted({str(v) for v in df["version"].unique()})
        if df.empty:
            continue
        peak_src = f"{spec.name} spec ({spec.source})"
        if table == "gemm_perf":
            rows = _gemm(df, sel, spec, peak_src)
        elif table in ("context_attention_perf", "generation_attention_perf"):
            rows = _attention(df, sel, spec, peak_src, table.split("_")[0])
        elif table == "moe_perf":
            rows = _moe(df, sel, spec, peak_src)
        else:
            rows = _comm(df, sel, table, spec.name)
        dup = rows["case_id"].duplicated()
        if dup.any():  # shapes that differ only in a column the case name leaves out (none in the 0.12.0 data)
            skips.append({"suite": table, "case": f"{int(dup.sum())} row(s)",
                          "reason": "two rows with one case id (they differ in a column the importer does not read); "
                                    "the first kept"})
            rows = rows[~dup.to_numpy()]
            df = df[~dup.to_numpy()]
        samples.extend({"case_id": cid, "rep": i, "time_s": float(t) * 1e-3, "inner_reps": 1}
                       for cid, ts in zip(rows["case_id"], df["_samples_ms"]) if ts is not None for i, t in enumerate(ts))
        counts[table] = len(rows)
        flagged[table] = int((~rows["valid"]).sum())
        frames.append(rows)
    if spec is None:
        raise HarnessError(f"aiconfigurator import: {sel.system}/{sel.engine} {sel.version} holds no table this importer "
                           "reads (gemm, attention, moe, comm).")
    cases = pd.concat(frames, ignore_index=True)
    dup = cases["case_id"].duplicated()
    if dup.any():  # the same collective in two tables (e.g. NCCL rows repeated): keep the first
        cases = cases[~dup.to_numpy()].reset_index(drop=True)
    return Imported(sel, device, cases, skips, facts, counts, flagged, samples)


def _collection_meta(path: Path) -> dict[str, Any]:
    p = path.parent / "collection_meta.yaml"
    d = _yaml(p) if p.is_file() else None
    if not isinstance(d, dict):
        return {}
    return {"provenance": d.get("provenance"), "runtime": d.get("runtime")}


def facts_of(imp: Imported, root: Path) -> dict[str, Any]:
    """What the run's manifest records of the source: the database and version, engine, tables, their metadata."""
    sel = imp.selection
    db = database_name(root)
    nccl = sel.tables.get("nccl_perf")
    notes = list(sel.notes)
    if nccl is not None:
        inside = imp.facts.get("nccl_versions_in_rows") or []
        if inside and inside != [nccl.parent.name]:
            notes.append(f"nccl_perf: the folder says NCCL {nccl.parent.name}, its rows {', '.join(inside)} (the torch "
                         "build's NCCL that ran the test)")
    notes += [f"{t}: {why}" for t, why in (imp.facts.get("repeats") or {}).items()]
    flagged = {t: n for t, n in imp.flagged.items() if n}
    if flagged:
        notes.append("cases above our spec peak, flagged and never fitted: "
                     + ", ".join(f"{t} {n} of {imp.counts[t]}" for t, n in flagged.items()))
    return {
        "kernel_database": db, "engine": sel.engine, "engine_version": sel.version, "system": sel.system,
        "gpu_name": imp.gpu_name, "source_root": str(root),
        "tables": {t: str(p.relative_to(root)) for t, p in sel.tables.items()},
        "collection_meta": {t: _collection_meta(p) for t, p in sel.tables.items()},
        "rows": imp.counts, "above_peak": imp.flagged, "provenance_notes": notes,
        "latency_unit": "ms (aiconfigurator log_perf)", "message_size_unit": "elements (bytes = elements x dtype size)",
    }


def system_device(root: Path, system: str) -> str | None:
    """The device name a system's GEMM or attention rows carry (one column of one table), or None."""
    import pyarrow.parquet as pq

    for f in sorted((root / system).glob("*/*/*/*.parquet")):
        if f.parent.parent.parent.name not in ("gemm", "attention"):
            continue
        try:
            col = pq.read_table(f, columns=["device"]).column("device")
        except Exception:  # noqa: BLE001 - a table without the column or unreadable: try the next
            continue
        if len(col):
            return str(col[0])
    return None


def listing(root: Path, system_names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Per system and engine: the version an import reads, its tables, the device and our GPU spec for it."""
    from harness.specs.device_names import spec_name_for_device

    out = []
    for system in system_names or systems(root):
        device = system_device(root, system)
        for engine in ENGINES:
            sel = select(root, system, engine)
            if sel is None:
                continue
            out.append({"system": system, "engine": engine, "version": sel.version, "family": sel.family,
                        "device": device, "gpu_spec": spec_name_for_device(device), "tables": sorted(sel.tables),
                        "notes": list(sel.notes)})
    return out


def parse_engines(items: Iterable[str] | None) -> list[tuple[str, str | None]]:
    """["vllm", "trtllm@1.0.0"] -> [("vllm", None), ("trtllm", "1.0.0")]; all engines when none is given."""
    out = []
    for item in items or ENGINES:
        name, _, ver = str(item).partition("@")
        if name not in ENGINES:
            raise HarnessError(f"--engine {item!r}: aiconfigurator measures {', '.join(ENGINES)}; write ENGINE or "
                               "ENGINE@VERSION (e.g. trtllm@1.0.0).")
        out.append((name, ver or None))
    return out


def import_aic(path: str | Path | None = None, system_names: Iterable[str] | None = None,
               engines: Iterable[str] | None = None, out: str | Path = "results",
               command_line: list[str] | None = None) -> list[dict[str, Any]]:
    """File aiconfigurator's kernel data as runs results/<system>-aic-<engine>-<version>/<run_id>/ (kind "import").

    One run per system and engine. Returns one summary per run filed (path, run id, machine, family, rows)."""
    from harness.calibration.runs import KERNEL_TABLES_FILE
    from harness.importers.aic_grids import build_tables
    from harness.model.kernel_tables_codec import tables_to_dict
    from harness.records import new_manifest
    from harness.store import RunWriter

    from harness.specs.device_names import spec_name_for_device

    root = data_root(path)
    have = systems(root)
    chosen = list(system_names or [])
    unknown = [s for s in chosen if s not in have]
    if unknown:
        raise HarnessError(f"aiconfigurator import: no kernel data for system(s) {', '.join(unknown)} in {root}; it has "
                           f"{', '.join(have)}.")
    if not chosen:  # every system whose GPU has a spec here; a named one without is an error naming the fix
        chosen = [s for s in have if spec_name_for_device(system_device(root, s)) is not None]
    filed = []
    for system in chosen:
        for engine, version in parse_engines(engines):
            sel = select(root, system, engine, version)
            if sel is None:
                continue
            imp = read_selection(sel)
            facts = facts_of(imp, root)
            machine = f"{system}-{sel.family}"
            manifest = new_manifest(
                "import", gpu_name=imp.gpu_name, command_line=command_line, machine=machine,
                extra={"tool": TOOL, "source_file": str(root / system), "tool_facts": facts, "kernel_family": sel.family,
                       "suites": [SUITE_KERNEL, SUITE_COMM]},
                notes=[f"imported from {facts['kernel_database']} ({system}, {engine} {sel.version}); host fields describe "
                       "the importing machine, tool_facts the source"],
            )
            tables = build_tables(root, system, spec_name_for_device(imp.gpu_name), engine, version)
            with RunWriter(manifest, out) as w:
                w.append("micro_cases", imp.cases)
                # the step model's kernel grids of the same tables, filed with the run into database entries
                w.write_json(KERNEL_TABLES_FILE, tables_to_dict(tables))
                if imp.samples:
                    w.append("micro_samples", imp.samples)
                if imp.skips:
                    w.append("micro_skips", imp.skips)
            filed.append({"path": str(w.path), "run_id": manifest.run_id, "machine": machine, "family": sel.family,
                          "system": system, "gpu_name": imp.gpu_name, "rows": imp.counts, "above_peak": imp.flagged,
                          "notes": facts["provenance_notes"], "skips": imp.skips})
    if not filed:
        raise HarnessError(f"aiconfigurator import: no table of engine(s) {', '.join(e for e, _ in parse_engines(engines))} "
                           f"for {', '.join(chosen)} in {root}.")
    return filed
