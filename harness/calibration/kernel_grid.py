"""Our calibration cases read off an imported kernel grid, at a reference model's shapes (imported kernel data).

A kernel database (aiconfigurator's, harness/importers/aic.py) times GEMMs on a grid of (M, N, K) and
attention on a grid of batch, context and heads, for no model in particular. The fit's curves are
defined on a model's work (docs/calibration.md), so the grid is read at the shapes of one model —
by default qwen3-8b, the model `harness micro run` measures on a GPU, so that imported and own
entries of one GPU are comparable:

- prefill: the model's projections (qkv, o, gate_up, down; `microbench.gemm.projections`) at M =
  tokens, as `gemm` cases (GemmParams with model, projection and tokens). A fused shape the grid
  lacks is read as its two halves (gate_up of qwen3-8b: N = 2 x 12288 is off the grid, 12288 twice is
  on it; same FLOPs). A token count is used only where every projection is on the grid and valid.
  The fit is then the gemm suite's: Σ FLOPs / (Σ time · peak) per token count;
- decode: one decode step of the model composed from the grid, per batch b and context c:
  n_layers · (Σ projections' GEMM time at M = b + generation attention time at (b, c, heads,
  KV heads, head dim)), counting the bytes the model's roofline counts (weights + KV:
  n_layers · (Σ N·K·w + b·c·2·kv_heads·head_dim·kv_bytes)). These are `decode` cases (DecodeParams,
  kind "step", ops "composed from kernel timings"): no elementwise ops, norms, rope, sampling or
  embedding/LM head are in the time, so the composed MBU is an upper bound of a served step's.
  bf16 weights with bf16 KV give the "bf16" curves, fp8 weights with fp8 KV the "fp8" ones.

A grid's kernel source per dtype is the one covering the shapes with the most rows (an engine runs one
path); which was read is a warning of the record. A step or token count with any invalid component
(above the spec peak) is left out; when more than INVALID_SHARE_LIMIT of the attention cases at the
model's heads that read at least CACHE_SAFE_BYTES (more than any L2, so no cache can explain them)
are above the HBM peak, the table is not used at all (the rest carry the same error).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.errors import HarnessError

DEFAULT_MODEL = "qwen3-8b"
MIN_DECODE_CONTEXT = 128  # shorter contexts say little about a served decode step and would bloat the entry
MIN_PREFILL_TOKENS = 16  # below this a prefill is a handful of rows: bandwidth-bound, not what compute efficiency models
CURVE_DTYPES = ("bf16", "fp16", "fp8")  # the dtypes a plan runs at; fp8_block and weight-only types stay imported only
INVALID_SHARE_LIMIT = 0.01
# a KV read this large cannot be served from any catalog GPU's L2 (H100 50 MB, B200 126 MB, RTX PRO 6000 128 MB): such a
# case above the HBM peak is a measurement or labelling error, where a small one may be a legitimately cache-served read
CACHE_SAFE_BYTES = 256 * 2**20
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0}
DECODE_DTYPES = (("bf16", "bf16"), ("fp8", "fp8"))  # (GEMM dtype, KV dtype) of the composed steps


def _frame(rows, record: str):
    """Grid rows of one params record, with their fields as columns (read from the params dicts, vectorized)."""
    import pandas as pd

    tags = np.array([p.get("params_record") == record for p in rows["params"]], dtype=bool)
    sub = rows[tags].reset_index(drop=True)
    fields = pd.DataFrame(list(sub["params"])) if len(sub) else pd.DataFrame()
    return pd.concat([sub, fields.add_prefix("p_")], axis=1)


def _pick_source(df, shapes_ok) -> tuple[str, list[str]]:
    """The kernel source with the most rows among those covering the shapes; and all sources seen."""
    sources = sorted(set(df["p_kernel_source"]))
    cover = [s for s in sources if shapes_ok(df[df["p_kernel_source"] == s])]
    if not cover:
        return "", sources
    return max(cover, key=lambda s: (int((df["p_kernel_source"] == s).sum()), s)), sources


def _projection_shapes(model) -> dict[str, tuple[int, int]]:
    from microbench.gemm import projections

    return projections(model)  # name -> (K, N)


def derive(cases, model_name: str | None = None) -> tuple[Any, list[str], str]:
    """(rows to add to the cases — gemm and decode cases at the model's shapes —, warnings, the model name) from the
    kernel-grid cases among `cases` (suite "kernel"); (empty, [], "") when there are none."""
    import pandas as pd

    grid = cases[cases["suite"] == "kernel"]
    if grid.empty:
        return pd.DataFrame(), [], ""
    from harness.specs.models import get_model

    model = get_model(model_name or DEFAULT_MODEL)
    if model.attention != "gqa" or model.is_moe:
        raise HarnessError(f"--model {model.name}: a kernel grid is read at a dense GQA model's shapes (its projections "
                           "and attention heads); give a dense model such as qwen3-8b.")
    warnings: list[str] = []
    out = []
    for (family, device), g in grid.groupby(["backend", "device_key"], sort=True):
        gemm = _frame(g, "kernel.gemm/1")
        attn = _frame(g, "kernel.attention/1")
        shapes = _gemm_table(gemm, model, family, device, warnings)
        made = [_prefill_rows(table, model, family, device, dtype, warnings) for dtype, table in shapes.items()]
        made += [_decode_rows(shapes[wdt], attn, model, family, device, wdt, kvdt, warnings)
                 for wdt, kvdt in DECODE_DTYPES if wdt in shapes]
        run_id = str(g["run_id"].iloc[0])  # one import per family; a second import of it would repeat the same cases
        out += [m.assign(run_id=run_id) for m in made if m is not None and len(m)]
    if not out:
        warnings.append(f"the kernel grid holds no GEMM at all of {model.name}'s projection shapes; no curve fitted from it "
                        "(give --model a model whose shapes the grid holds, e.g. qwen3-8b)")
        return pd.DataFrame(), warnings, model.name
    return pd.concat(out, ignore_index=True), warnings, model.name


def _gemm_table(gemm, model, family: str, device: str, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """dtype -> {"source": kernel source, "proj": {name: {M: (time_s, valid, case_id, flops, peak row)}}, "split": ...}."""
    if gemm.empty:
        return {}
    out: dict[str, dict[str, Any]] = {}
    proj = _projection_shapes(model)
    for dtype, d in gemm.groupby("dtype", sort=True):
        if dtype not in CURVE_DTYPES:  # fp8_block, weight-only, nvfp4 ...: imported, no plan dtype reads them
            continue
        have = {(int(n), int(k)) for n, k in zip(d["p_n"], d["p_k"])}
        plan: dict[str, tuple[int, int, int]] = {}  # name -> (N read, K, times: 1, or 2 for a split fused shape)
        for name, (k, n) in proj.items():
            if (n, k) in have:
                plan[name] = (n, k, 1)
            elif n % 2 == 0 and (n // 2, k) in have and name == "gate_up":
                plan[name] = (n // 2, k, 2)
        missing = [name for name in proj if name not in plan]
        if missing:
            warnings.append(f"{family} on {device} ({dtype}): the GEMM grid lacks {model.name}'s "
                            + ", ".join(f"{m} (N={proj[m][1]}, K={proj[m][0]})" for m in missing)
                            + "; no prefill or decode curve at this dtype")
            continue

        def covers(sub, plan=plan):
            got = {(int(n), int(k)) for n, k in zip(sub["p_n"], sub["p_k"])}
            return all((n, k) in got for n, k, _ in plan.values())

        source, sources = _pick_source(d, covers)
        if not source:
            warnings.append(f"{family} on {device} ({dtype}): no single GEMM kernel source covers {model.name}'s shapes "
                            f"({', '.join(sources)}); no curve at this dtype")
            continue
        d = d[d["p_kernel_source"] == source]
        table: dict[str, dict[int, tuple]] = {}
        for name, (n, k, times) in plan.items():
            sel = d[(d["p_n"] == n) & (d["p_k"] == k)]
            table[name] = {int(m): (float(t) * times, bool(v), str(cid), 2.0 * m * n * k * times, pf, pb, ps)
                           for m, t, v, cid, pf, pb, ps in zip(sel["p_m"], sel["median_s"], sel["valid"], sel["case_id"],
                                                               sel["peak_flops_per_s"], sel["peak_bytes_per_s"],
                                                               sel["peak_source"])}
        split = [name for name, (_, _, t) in plan.items() if t == 2]
        note = (f"{family} on {device} ({dtype}): {model.name}'s GEMMs read from kernel source {source!r}"
                + (f" (of {', '.join(sources)})" if len(sources) > 1 else "")
                + (f"; {', '.join(split)} read as two GEMMs of half its width (the fused shape is off the grid)"
                   if split else ""))
        warnings.append(note)
        out[str(dtype)] = {"source": source, "proj": table, "plan": plan}
    return out


def _base_row(family: str, device: str, dtype: str, suite: str, case: str, record: Any, median_s: float,
              flops: float, nbytes: float, peak_flops: float, peak_bytes: float, peak_source: str) -> dict[str, Any]:
    # a short id: the curve names the family, device and dtype; the grid cases it came from are in its params
    return {"case_id": f"{suite}:{case}", "suite": suite, "case": case, "backend": family,
            "device": "cuda:0", "device_key": device, "dtype": dtype, "record": record, "params": record.to_params(),
            "median_s": median_s, "useful_flops": flops, "useful_bytes": nbytes, "peak_flops_per_s": peak_flops,
            "peak_bytes_per_s": peak_bytes, "peak_source": peak_source, "valid": True, "n_samples": 1}


def _prefill_rows(table: dict[str, Any], model, family: str, device: str, dtype: str, warnings: list[str]):
    import pandas as pd

    from microbench.params import GemmParams

    proj = table["proj"]
    ms = sorted(m for m in set.intersection(*(set(v) for v in proj.values())) if m >= MIN_PREFILL_TOKENS)
    rows, dropped = [], []
    for m in ms:
        parts = {name: proj[name][m] for name in proj}
        if not all(p[1] for p in parts.values()):
            dropped.append(m)
            continue
        for name, (t, _, cid, flops, pf, pb, ps) in parts.items():
            n, k, times = table["plan"][name]
            rec = GemmParams.of(m=m, n=n * times, k=k, tokens=m, model=model.name, projection=name,
                                kernel_grid_cases=[cid], kernel_source=table["source"])
            rows.append(_base_row(family, device, dtype, "gemm", f"{model.name}-{name}-t{m}", rec, t, flops, 0.0, pf, pb,
                                  f"{ps}; {model.name}'s projections read off the {family} GEMM grid"))
    if dropped:
        warnings.append(f"{family} on {device} ({dtype}): token count(s) {dropped} left out of the prefill curve: a "
                        "projection's GEMM is above the spec peak there (flagged, never fitted)")
    return pd.DataFrame(rows)


def _decode_rows(table: dict[str, Any], attn, model, family: str, device: str, wdt: str, kvdt: str,
                 warnings: list[str]):
    import pandas as pd

    from microbench.params import OPS_COMPOSED, DecodeParams

    what = f"{family} on {device} ({wdt} weights, {kvdt} KV)"
    if attn.empty:
        warnings.append(f"{what}: no attention table in the grid; no decode curve")
        return None
    a = attn[(attn["p_phase"] == "generation") & (attn["p_num_heads"] == model.n_heads)
             & (attn["p_num_kv_heads"] == model.n_kv_heads) & (attn["p_head_dim"] == model.head_dim)
             & (attn["p_window_tokens"] == 0) & (attn["p_kv_dtype"] == kvdt)]
    if a.empty:
        warnings.append(f"{what}: the attention grid has no generation case at {model.name}'s heads ({model.n_heads} "
                        f"query, {model.n_kv_heads} KV, head dim {model.head_dim}); no decode curve")
        return None
    source, sources = _pick_source(a, lambda sub: len(sub) > 0)
    a = a[a["p_kernel_source"] == source]
    big = a[a["useful_bytes"] >= CACHE_SAFE_BYTES]
    share = float((~big["valid"].astype(bool)).mean()) if len(big) else 0.0
    if share > INVALID_SHARE_LIMIT:
        worst = float(np.nanmax(big["useful_bytes"] / big["median_s"] / big["peak_bytes_per_s"]))
        warnings.append(f"{what}: {share:.0%} of the generation attention cases at {model.name}'s heads ({source}) that read "
                        f"at least {CACHE_SAFE_BYTES >> 20} MiB (more than any L2) read it faster than the HBM peak (up to "
                        f"{worst:.0%}): a measurement or labelling error of the table; no decode curve from it (the cases "
                        "below the peak may carry the same error)")
        return None
    weights = {name: table["plan"][name][0] * table["plan"][name][2] * table["plan"][name][1] * WEIGHT_BYTES[wdt]
               for name in table["proj"]}
    layer_weight_bytes = sum(weights.values())
    proj = table["proj"]
    att = {(int(b), int(c)): (float(t), bool(v), str(cid), pb, ps)
           for b, c, t, v, cid, pb, ps in zip(a["p_batch"], a["p_context_tokens"], a["median_s"], a["valid"], a["case_id"],
                                                a["peak_bytes_per_s"], a["peak_source"])}
    rows, dropped, compute_bound = [], 0, set()
    L = model.n_layers
    for (b, c), (ta, va, acid, pb, ps) in sorted(att.items(), key=lambda x: (x[0][1], x[0][0])):
        if c < MIN_DECODE_CONTEXT or any(b not in proj[name] for name in proj):
            continue
        parts = [proj[name][b] for name in proj]
        kv_bytes = b * c * 2.0 * model.n_kv_heads * model.head_dim * KV_BYTES[kvdt]
        nbytes = L * (layer_weight_bytes + kv_bytes)
        flops = L * (sum(p[3] for p in parts) + 4.0 * b * model.n_heads * c * model.head_dim)
        if flops / parts[0][4] >= nbytes / pb:
            # compute-bound at the peaks: the roofline reads compute efficiency here, and the MBU of such a step is
            # not a bandwidth efficiency (it falls with the batch), so the curve stops where the bound changes
            compute_bound.add(b)
            continue
        if not va or not all(p[1] for p in parts):
            dropped += 1
            continue
        t_step = L * (sum(p[0] for p in parts) + ta)
        rec = DecodeParams.of(model=model.name, kind="step", batch=b, context_tokens=c, mode=None,
                              weight_bytes=L * layer_weight_bytes, kv_bytes=L * kv_bytes, ops=OPS_COMPOSED,
                              kernel_grid_cases=[p[2] for p in parts] + [acid], attention_source=source,
                              gemm_source=table["source"], kv_dtype=kvdt)
        rows.append(_base_row(family, device, wdt, "decode", f"{model.name}-b{b}-c{c}-kv{kvdt}", rec, t_step, 0.0, nbytes,
                              parts[0][4], pb, f"{ps}; a {model.name} decode step composed from the {family} grid "
                              f"(GEMMs {table['source']}, attention {source}, KV {kvdt})"))
    if dropped:
        warnings.append(f"{what}: {dropped} (batch, context) step(s) left out: a component kernel is above the spec peak")
    if compute_bound:
        warnings.append(f"{what}: batch {min(compute_bound)} and above left out at some contexts: the step is compute-bound "
                        "at the peaks there (FLOPs/peak FLOP/s >= bytes/peak bandwidth), where the roofline uses the "
                        "compute efficiency")
    if rows:
        warnings.append(f"{what}: decode steps composed from GEMMs {table['source']!r} and attention {source!r}"
                        + (f" (of {', '.join(sources)})" if len(sources) > 1 else "")
                        + "; no elementwise ops, norms or LM head in the time, so the MBU is an upper bound of a served "
                          "step's")
    return pd.DataFrame(rows)
