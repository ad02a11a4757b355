"""precision suite: the same GEMM and the same decode step in every dtype the device supports (Chapter 19, §19.2).

Dynamic precision switching pays only as far as a lower precision is faster on the device at
hand. Each dtype runs the identical shapes, so the report can put the speed-ups side by side:
GEMM C[M,N] = A[M,K]·W[K,N] (the gemm suite's counting: 2·M·N·K FLOPs, (MK + KN + MN)·b bytes) and
one decode step of the random-weight decoder (the decode suite's counting, from
harness.model.forward.decode_step_work). A dtype the device cannot run is recorded as a skip with
its reason (fp8 needs compute capability ≥ 8.9; torch has no fast fp16 matmul on the CPU); fp8 decode
is always a skip: the decoder has no scaled-matmul path, so only the fp8 GEMM is measured.
GPU: Qwen3-8B gate_up projection at 2048 tokens and a decode step at batch 32; CPU: the tiny
configuration's o projection at 64 tokens and a decode step at batch 8.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from harness.model.forward import decode_step_work
from harness.specs.models import get_model
from harness.units import dtype_bytes
from microbench.backends import Backend
from microbench.case import Skip, Work
from microbench.gemm import projections, time_gemm
from microbench.graph_step import time_step
from microbench.suite import Item, Planned, SuiteContext
from microbench.transformer import TINY, RandomDecoder

NAME = "precision"
DESCRIPTION = "one GEMM and one decode step in fp32/bf16/fp16/fp8 where the device supports each (§19.2 precision switching)"

DTYPES = ("fp32", "bf16", "fp16", "fp8")


def _decode_case(ctx: SuiteContext, b: Backend, m, dtype: str, batch: int, context: int):
    eb = dtype_bytes(dtype)
    d = RandomDecoder(m, b.module, b.device, b.dtype_of(dtype), batch, context, ctx.seed)
    w = decode_step_work(m, batch, context, eb, eb)
    st = time_step(b, lambda: d.decode_step(batch, context), ctx.policy)  # static inputs, graph replay on CUDA
    return ctx.result(NAME, f"{m.name}-decode-b{batch}-c{context}", b, dtype,
                      {"model": m.name, "kind": "decode", "batch": batch, "context_tokens": context,
                       "weight_bytes": w.weight_bytes, "kv_bytes": w.kv_read_bytes, "mode": st.graph_mode, **st.params()},
                      Work(w.flops, w.bytes), st.primary, notes=st.notes)


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, b.label, "precision switching is measured with torch (numpy has no bf16, fp16 or fp8 kernels)")
            continue
        if b.is_cuda:
            m = get_model(ctx.options.get("model", "qwen3-8b"))
            shape, tokens, batch, context = "gate_up", 2048, 32, (2048 if ctx.quick else 4096)
            dm = m
        else:
            m, shape, tokens, batch, context = TINY, "o", 64, 8, 256
            dm = TINY
        k, n = projections(m)[shape]
        for dtype in DTYPES:
            why = b.supports(dtype)
            if why:
                yield Skip(NAME, f"{b.label}-{dtype}", why)
                continue
            case = f"{m.name}-{shape}-t{tokens}"
            yield Planned(NAME, f"{case}-{dtype}", lambda b=b, dtype=dtype, case=case, k=k, n=n:
                          _tagged(time_gemm(ctx, b, case, tokens, n, k, dtype, {"model": m.name, "kind": "gemm", "projection": shape,
                                                                                  "tokens": tokens}), b))
            if dtype == "fp8":
                yield Skip(NAME, f"{b.label}-decode-fp8", "the random-weight decoder has no fp8 (scaled matmul) path; the fp8 GEMM case stands for it")
                continue
            yield Planned(NAME, f"{dm.name}-decode-{dtype}", lambda b=b, dtype=dtype: _decode_case(ctx, b, dm, dtype, batch, context))


def _tagged(r, b: Backend):
    """Rename the gemm suite's result into this suite, noting whether fp32 ran as TF32 on the GPU."""
    notes = r.notes
    if b.is_cuda and r.dtype == "fp32":
        tf32 = bool(b.module.backends.cuda.matmul.allow_tf32)
        notes = (*notes, f"torch.backends.cuda.matmul.allow_tf32={tf32}: fp32 matmuls ran {'as TF32' if tf32 else 'in full fp32'}")
    return dataclasses.replace(r, suite=NAME, notes=notes)
