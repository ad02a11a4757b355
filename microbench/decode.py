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
run's `micro_kernels` table: the per-kernel breakdown of one step (and `kernels_per_step` on a GPU).
Two steps per (batch, context), the same math (microbench.transformer): `<model>-step-b…` with eager
ops (params ops = "eager ops": one kernel per elementwise op, ~700 per Qwen3-8B step; a baseline) and
`<model>-step-fused-b…` compiled by torch.compile (ops = "fused (torch.compile inductor)"), compiled
and warmed up before its timing; calibration fits the decode curve from the fused one when present.
A fused step that cannot compile is a skip with the reason. On the CPU the fused step runs only with
HARNESS_DECODE_FUSED_CPU=1 (the compile takes ~15-30 s per shape there).
Attention kernels: one layer's decode attention through each SDPA backend forced by name
(flash, memory-efficient, cuDNN, math), FlashAttention and FlashInfer where installed
(microbench.attention); a backend that refuses the shape is a skip with torch's reason.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator

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
from microbench.transformer import OPS_EAGER, OPS_FUSED, TINY, RandomDecoder

NAME = "decode"
DESCRIPTION = ("decode step at batch 1…64 (weights + KV + attention), eager ops and fused (torch.compile): bandwidth "
               "efficiency vs batch; attention decode alone")
# opt-in for the fused step on the CPU: compiling the tiny model there takes ~15-30 s per shape (C++ build)
FUSED_CPU_ENV = "HARNESS_DECODE_FUSED_CPU"


def step_case_name(model: str, batch: int, context: int, fused: bool) -> str:
    """`<model>-step-b1-c2048` (eager ops, the name older runs carry) or `<model>-step-fused-b1-c2048`."""
    return f"{model}-step-{'fused-' if fused else ''}b{batch}-c{context}"


def fused_wanted(ctx: SuiteContext, b: Backend) -> tuple[bool, str]:
    """Whether the fused step runs on `b` (GPU: yes; CPU: only when asked), and the skip reason when not.

    ctx.options["decode_fused"] (True/False) overrides the default; HARNESS_DECODE_FUSED_CPU=1 turns it on
    for the CPU."""
    opt = ctx.options.get("decode_fused")
    if opt is not None:
        return bool(opt), "fused decode step turned off (options decode_fused=False)"
    if b.is_cuda:
        return True, ""
    if os.environ.get(FUSED_CPU_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return True, ""
    return False, (f"fused decode step (torch.compile) not run on the CPU by default: compiling takes ~15-30 s per shape "
                   f"there; set {FUSED_CPU_ENV}=1 to run it (the eager-ops step is measured)")


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
        fused_on, fused_off_why = fused_wanted(ctx, b)
        for bs in batches:
            for fused in (False, True):
                case = step_case_name(m.name, bs, context, fused)
                if fused and not fused_on:
                    yield Skip(NAME, case, fused_off_why)
                    continue
                yield Planned(NAME, case, _step_runner(ctx, b, m, dtype, bs, context, model, case, fused, bs == profile_batch))
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


def _step_runner(ctx: SuiteContext, b: Backend, m, dtype: str, bs: int, context: int, model: Callable[[], RandomDecoder],
                 case: str, fused: bool, profile: bool) -> Callable[[], Any]:
    """The thunk of one decode-step case: eager ops, or fused (compiled and warmed up first, outside the timing)."""

    def run():
        d = model()
        eb = dtype_bytes(dtype)
        w = decode_step_work(m, bs, context, eb, eb)
        extra: dict[str, Any] = {"ops_detail": "one kernel per elementwise op (RMSNorm, RoPE, KV write, SiLU, residual)"}
        notes: list[str] = []
        if fused:
            why = d.prepare_fused(bs, context)
            if why is not None:
                return Skip(NAME, case, f"{why}; the eager-ops case {step_case_name(m.name, bs, context, False)} is the measurement")
            facts = d.fused_shapes[(bs, context)]
            extra = {"ops_detail": "per-layer function and final norm + LM head compiled by torch.compile (inductor, "
                                   "dynamic=False, fullgraph); GEMMs and SDPA are library kernels", **facts}
            notes.append(f"fused step: compiled and warmed up in {facts['fused_compile_and_warmup_s']:.3g} s before timing "
                         f"({facts['fused_graphs_compiled']} graph(s) compiled for this shape)")
            step = lambda: d.fused_decode_step(bs, context)  # noqa: E731
        else:
            step = lambda: d.decode_step(bs, context)  # noqa: E731 - static inputs: no host→device copy per step
        st = time_step(b, step, ctx.policy)
        tables = {}
        if profile:
            rows = profile_step(b, step)
            tables["micro_kernels"] = table_rows(f"{NAME}:{case}:{b.name}:{b.device}:{dtype}", rows, st.primary.stats.median_s)
            extra.update(kernel_count(rows))
        params = DecodeParams(model=m.name, kind="step", batch=bs, context_tokens=context, mode=st.graph_mode,
                              weight_bytes=w.weight_bytes, kv_bytes=w.kv_read_bytes, ops=OPS_FUSED if fused else OPS_EAGER,
                              extra={**extra, **st.params()})
        return ctx.result(NAME, case, b, dtype, params.to_params(), Work(w.flops, w.bytes), st.primary,
                          cache_state=_cache_note(b, w.bytes), notes=(*st.notes, *notes), tables=tables)

    return run


def kernel_count(rows) -> dict[str, Any]:
    """Kernels launched per step from a profile table (GPU); on the CPU the table holds aten operators, which an
    inductor-compiled step does not go through, so no count is given there."""
    if rows and rows[0].what == "cuda-kernel device time":
        return {"kernels_per_step": round(sum(r.calls_per_step for r in rows), 2)}
    return {"kernels_per_step": None}


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
