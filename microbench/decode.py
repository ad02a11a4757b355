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

Timing (microbench.graph_step): every step reads static inputs and is captured once into a CUDA
graph and replayed, as engines run decode; the eager time and the launch overhead (eager − replay)
are recorded beside it. The first batch's step is also profiled (torch.profiler / kineto) into the
run's `micro_kernels` table: the per-kernel breakdown of one step.
Attention kernels: one layer's decode attention through each SDPA backend forced by name
(flash, memory-efficient, cuDNN, math), FlashAttention and FlashInfer where installed
(microbench.attention); a backend that refuses the shape is a skip with torch's reason.
"""

from __future__ import annotations

from typing import Iterator

from harness.model.forward import attention_pair_flops, decode_step_work
from harness.model.kv import kv_bytes_per_token
from harness.specs.models import get_model
from harness.units import dtype_bytes
from microbench.attention import SDPA_BACKENDS, flash_attn_call, flashinfer_call, try_backend
from microbench.backends import Backend
from microbench.case import Skip, Work
from microbench.graph_step import time_step
from microbench.kernel_profile import profile_step, table_rows
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
        profile_batch = batches[0]
        for bs in batches:
            case = f"{m.name}-step-b{bs}-c{context}"

            def run_step(b=b, m=m, bs=bs, case=case, dtype=dtype, context=context, model=model):
                d = model()
                w = decode_step_work(m, bs, context, eb, eb)
                step = lambda: d.decode_step(bs, context)  # noqa: E731 - static inputs: no host→device copy per step
                st = time_step(b, step, ctx.policy)
                tables = {}
                if bs == profile_batch:
                    rows = profile_step(b, step)
                    tables["micro_kernels"] = table_rows(f"{NAME}:{case}:{b.name}:{b.device}:{dtype}", rows, st.primary.stats.median_s)
                return ctx.result(NAME, case, b, dtype, DecodeParams(model=m.name, kind="step", batch=bs, context_tokens=context,
                                                                     mode=st.graph_mode, weight_bytes=w.weight_bytes,
                                                                     kv_bytes=w.kv_read_bytes, extra=st.params()).to_params(),
                                  Work(w.flops, w.bytes), st.primary, cache_state=_cache_note(b, w.bytes), notes=st.notes, tables=tables)

            yield Planned(NAME, case, run_step)
        for bs in batches:
            case = f"{m.name}-attention-b{bs}-c{context}"

            def run_attn(b=b, m=m, bs=bs, case=case, dtype=dtype, context=context, model=model):
                d = model()
                work = attention_work(m, bs, context, eb)
                st = time_step(b, lambda: d.attention_only(bs, context), ctx.policy)
                return ctx.result(NAME, case, b, dtype, DecodeParams(model=m.name, kind="attention", batch=bs, context_tokens=context,
                                                                     mode=st.graph_mode,
                                                                     extra={"attention_only": True, "sdpa_backend": "torch's choice",
                                                                            **st.params()}).to_params(),
                                  work, st.primary, cache_state=_cache_note(b, work.useful_bytes), notes=st.notes)

            yield Planned(NAME, case, run_attn)
        yield from _kernel_cases(ctx, b, m, dtype, batches, context, model)


def _kernel_cases(ctx: SuiteContext, b: Backend, m, dtype: str, batches: list[int], context: int, model) -> Iterator[Item]:
    """Decode attention of one layer through each SDPA backend, FlashAttention and FlashInfer (skips say why not)."""
    eb = dtype_bytes(dtype)
    bs = batches[-1] if ctx.quick else max(batches)
    kinds = [("sdpa", be) for be in SDPA_BACKENDS] + [("flash_attn", None), ("flashinfer", None)]
    for kind, be in kinds:
        label = f"sdpa-{be.lower()}" if kind == "sdpa" else kind
        for batch in ([1, bs] if kind != "flashinfer" and not (ctx.quick and not b.is_cuda) else [1]):
            case = f"{m.name}-attention-layer-{label}-b{batch}-c{context}"

            def run(b=b, batch=batch, case=case, kind=kind, be=be, label=label):
                d = model()
                t = b.module
                q = t.randn((batch, m.n_heads, 1, m.head_dim), device=b.device, dtype=d.dtype)
                k, v = d.k_cache[0][:batch, :, :context], d.v_cache[0][:batch, :, :context]
                if kind == "sdpa":
                    fn, why = try_backend(t, be, q, k, v)
                elif kind == "flash_attn":
                    fn, why = flash_attn_call(t, q, k, v)
                else:
                    fn, why = flashinfer_call(t, q, k, v)
                if fn is None:
                    raise _KernelSkip(why)
                st = time_step(b, fn, ctx.policy)
                work = Work(useful_flops=batch * context * attention_pair_flops(m, "decode"),
                            useful_bytes=batch * context * kv_bytes_per_token(m, eb) / m.n_layers)
                return ctx.result(NAME, case, b, dtype, {"model": m.name, "kind": "attention-kernel", "kernel": label,
                                                         "sdpa_backend": be, "batch": batch, "context_tokens": context,
                                                         "layers": 1, **st.params()},
                                  work, st.primary, cache_state=_cache_note(b, work.useful_bytes), notes=st.notes)

            yield Planned(NAME, case, _skippable(run, case))


class _KernelSkip(Exception):
    pass


def _skippable(run, case: str):
    """A planned case that turns an unavailable kernel into a recorded skip instead of an error."""
    def go():
        try:
            return run()
        except _KernelSkip as exc:
            return Skip(NAME, case, str(exc))

    return go


def _cache_note(b: Backend, streamed_bytes: float) -> str:
    if not b.cache_bytes:
        return f"{b.cache_name} size unknown"
    if streamed_bytes > 2 * b.cache_bytes:
        return f"cold: streams {streamed_bytes / 2**20:.4g} MiB per step, > 2× {b.cache_name} ({b.cache_bytes / 2**20:.4g} MiB)"
    return (f"warm: streams {streamed_bytes / 2**20:.4g} MiB per step, within 2× {b.cache_name} ({b.cache_bytes / 2**20:.4g} MiB); "
            "bytes/s is a cache figure, not memory bandwidth")
