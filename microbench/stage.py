"""stage suite: a real forward pass with random weights, giving measured r_P and r_D to hold against the model.

Chapter 9, §9.2.3: r_P = new tokens per second of a prefill (d_P = L_new / r_P) and r_D = decode
calls per second, one call producing one token for each of B requests: r_D = B / t_step. The
model predicts each stage time as max(FLOPs / (η_c·peak), bytes / (η_b·bandwidth)) with
η = 0.5 by default; each case records the measured rate, the model's rate at η = 0.5 against the
same spec peak, and the implied efficiency (model time at 100 % / measured time), which is what
a calibration fits. GPU: Qwen3-8B bf16; CPU: the tiny configuration in fp32.
Both stages read static inputs and are timed as CUDA graph replays on the GPU (microbench.graph_step),
the eager time and launch overhead recorded beside them.
"""

from __future__ import annotations

from typing import Iterator

from harness.model.forward import decode_step_work, prefill_work
from harness.units import dtype_bytes
from microbench.backends import Backend
from microbench.case import Peak, Skip, Work
from microbench.graph_step import time_step
from microbench.params import StageDecodeParams, StagePrefillParams
from microbench.suite import Item, Planned, SuiteContext
from microbench.transformer import TINY, RandomDecoder
from harness.specs.models import get_model

NAME = "stage"
DESCRIPTION = "prefill of L tokens and decode steps at batch B of a random-weight model: measured r_P, r_D vs the model"

DEFAULT_EFFICIENCY = 0.5  # Chapter 9, §9.2.3


def roofline_s(flops: float, nbytes: float, peak: Peak, efficiency: float = 1.0) -> float | None:
    """max(FLOPs/(η·peak FLOP/s), bytes/(η·peak bytes/s)) over the terms whose peak is known; None if neither is."""
    terms = []
    if peak.flops_per_s:
        terms.append(flops / (efficiency * peak.flops_per_s))
    if peak.bytes_per_s:
        terms.append(nbytes / (efficiency * peak.bytes_per_s))
    return max(terms) if terms else None


def model_comparison(measured_s: float, flops: float, nbytes: float, peak: Peak, units: float) -> dict:
    """Measured rate (units/s), the model's rate at η=0.5 and the implied efficiency."""
    full = roofline_s(flops, nbytes, peak, 1.0)
    half = roofline_s(flops, nbytes, peak, DEFAULT_EFFICIENCY)
    return {
        "measured_rate_per_s": units / measured_s,
        "model_rate_at_50pct_per_s": units / half if half else None,
        "implied_efficiency": full / measured_s if full else None,
        "model_terms_known": [k for k, v in (("compute", peak.flops_per_s), ("memory", peak.bytes_per_s)) if v],
    }


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, b.label, "the stage forward pass is written in torch; numpy has no attention kernel")
            continue
        if b.is_cuda:
            m, dtype = get_model(ctx.options.get("model", "qwen3-8b")), "bf16"
            prefills = [2048] if ctx.quick else [512, 2048, 8192]
            decodes = [(32, 2048)] if ctx.quick else [(8, 4096), (32, 4096), (64, 4096)]
        else:
            m, dtype = TINY, "fp32"
            prefills = [128] if ctx.quick else [128, 512, 1024]
            decodes = [(8, 256)] if ctx.quick else [(8, 1024), (32, 1024)]
        max_ctx = max([*prefills, *(c for _, c in decodes)])
        max_b = max(bs for bs, _ in decodes)
        holder: dict = {}
        eb = dtype_bytes(dtype)

        def model(b=b, m=m, dtype=dtype, max_b=max_b, max_ctx=max_ctx, holder=holder) -> RandomDecoder:
            if "d" not in holder:
                holder["d"] = RandomDecoder(m, b.module, b.device, b.dtype_of(dtype), max_b, max_ctx, ctx.seed)
            return holder["d"]

        for L in prefills:
            case = f"{m.name}-prefill-L{L}"

            def run_prefill(b=b, m=m, L=L, case=case, dtype=dtype, model=model):
                d = model()
                w = prefill_work(m, L, 0, eb, eb)
                st = time_step(b, lambda: d.prefill(L), ctx.policy)
                meas = st.primary
                peak = b.peak(dtype)
                cmp = model_comparison(meas.stats.median_s, w.flops, w.bytes, peak, L)
                return ctx.result(NAME, case, b, dtype, StagePrefillParams(model=m.name, new_tokens=L, extra={
                                      "stage": "prefill", "phase": "prefill", "tokens": L, "r_p_tokens_per_s": cmp["measured_rate_per_s"],
                                      **cmp, **st.params()}).to_params(),
                                  Work(w.flops, w.bytes), meas, peak,
                                  notes=("attention FLOPs counted causal (i keys for query i); a kernel that computes the masked half does more",
                                         *st.notes))

            yield Planned(NAME, case, run_prefill)
        for bs, c in decodes:
            case = f"{m.name}-decode-b{bs}-c{c}"

            def run_decode(b=b, m=m, bs=bs, c=c, case=case, dtype=dtype, model=model):
                d = model()
                w = decode_step_work(m, bs, c, eb, eb)
                st = time_step(b, lambda: d.decode_step(bs, c), ctx.policy)  # static inputs, graph replay on CUDA
                meas = st.primary
                peak = b.peak(dtype)
                cmp = model_comparison(meas.stats.median_s, w.flops, w.bytes, peak, bs)
                return ctx.result(NAME, case, b, dtype, StageDecodeParams(model=m.name, batch=bs, context_tokens=c, extra={
                                      "stage": "decode", "phase": "decode", "r_d_calls_per_s": cmp["measured_rate_per_s"],
                                      **cmp, **st.params()}).to_params(),
                                  Work(w.flops, w.bytes), meas, peak, notes=st.notes)

            yield Planned(NAME, case, run_decode)
