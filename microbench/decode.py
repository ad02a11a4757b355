"""decode suite: one decode step emulated at batch 1…64 and a given context, and decode attention alone.

A decode step streams every weight once plus the batch's KV cache (Chapter 9, §9.2.3); its
bandwidth efficiency (MBU) rises with the batch because the weights are shared: the chapter's
33 % (batch 1) → 65 % (batch 64) curve of §8.6.3, quoted in §9.2.3, was measured this way.
Counted work is the analytical model's own (harness.model.forward.decode_step_work):
    bytes = weight bytes (non-embedding + LM head) + B·C·kv_bytes_per_token
    FLOPs = B·2·(active params + V·H) + B·C·4·h_q·d_h·layers
Attention alone reads the KV only: bytes = B·C·kv_bytes_per_token; FLOPs = B·C·4·h_q·d_h·layers.
GPU: Qwen3-8B in bf16; CPU: the tiny configuration in fp32 (its weights fit in a large LLC, which
the case's cache_state says).
"""

from __future__ import annotations

from typing import Iterator

from harness.model.forward import attention_pair_flops, decode_step_work
from harness.model.kv import kv_bytes_per_token
from harness.specs.models import get_model
from harness.units import dtype_bytes
from microbench.backends import Backend
from microbench.case import Skip, Work
from microbench.params import DecodeParams
from microbench.suite import Item, Planned, SuiteContext
from microbench.transformer import TINY, RandomDecoder

NAME = "decode"
DESCRIPTION = "decode step at batch 1…64 (weights + KV + attention): bandwidth efficiency vs batch; attention decode alone"


def attention_work(m, batch: int, context: int, kv_elem_bytes: float) -> Work:
    return Work(
        useful_flops=batch * context * attention_pair_flops(m, "decode") * m.n_layers,
        useful_bytes=batch * context * kv_bytes_per_token(m, kv_elem_bytes),
    )


def plan_for(ctx: SuiteContext, b: Backend):
    if b.is_cuda:
        m = get_model(ctx.options.get("model", "qwen3-8b"))
        return m, "bf16", ([1, 8, 32, 64] if ctx.quick else [1, 2, 4, 8, 16, 32, 64]), (2048 if ctx.quick else 4096)
    return TINY, "fp32", ([1, 8, 32] if ctx.quick else [1, 2, 4, 8, 16, 32, 64]), (256 if ctx.quick else 1024)


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, f"{b.label}", "the decode emulation is a torch forward pass; numpy has no attention kernel")
            continue
        m, dtype, batches, context = plan_for(ctx, b)
        holder: dict = {}

        def model(b=b, m=m, dtype=dtype, batches=batches, context=context, holder=holder) -> RandomDecoder:
            if "d" not in holder:
                holder["d"] = RandomDecoder(m, b.module, b.device, b.dtype_of(dtype), max(batches), context, ctx.seed)
            return holder["d"]

        eb = dtype_bytes(dtype)
        for bs in batches:
            case = f"{m.name}-step-b{bs}-c{context}"

            def run_step(b=b, m=m, bs=bs, case=case, dtype=dtype, context=context, model=model):
                d = model()
                w = decode_step_work(m, bs, context, eb, eb)
                meas = b.time(lambda: d.decode_step(bs, context), ctx.policy)
                return ctx.result(NAME, case, b, dtype, DecodeParams(model=m.name, kind="step", batch=bs, context_tokens=context,
                                                                     weight_bytes=w.weight_bytes, kv_bytes=w.kv_read_bytes).to_params(),
                                  Work(w.flops, w.bytes), meas, cache_state=_cache_note(b, w.bytes))

            yield Planned(NAME, case, run_step)
        for bs in batches:
            case = f"{m.name}-attention-b{bs}-c{context}"

            def run_attn(b=b, m=m, bs=bs, case=case, dtype=dtype, context=context, model=model):
                d = model()
                work = attention_work(m, bs, context, eb)
                meas = b.time(lambda: d.attention_only(bs, context), ctx.policy)
                return ctx.result(NAME, case, b, dtype, DecodeParams(model=m.name, kind="attention", batch=bs, context_tokens=context,
                                                                     extra={"attention_only": True}).to_params(),
                                  work, meas, cache_state=_cache_note(b, work.useful_bytes))

            yield Planned(NAME, case, run_attn)


def _cache_note(b: Backend, streamed_bytes: float) -> str:
    if not b.cache_bytes:
        return f"{b.cache_name} size unknown"
    if streamed_bytes > 2 * b.cache_bytes:
        return f"cold: streams {streamed_bytes / 2**20:.4g} MiB per step, > 2× {b.cache_name} ({b.cache_bytes / 2**20:.4g} MiB)"
    return (f"warm: streams {streamed_bytes / 2**20:.4g} MiB per step, within 2× {b.cache_name} ({b.cache_bytes / 2**20:.4g} MiB); "
            "bytes/s is a cache figure, not memory bandwidth")
