"""mixed_step suite: one decode step of batch B plus a prefill chunk of c tokens, step time vs c.

Chapter 9, §9.2.3 and Chapter 19, §19.11 (chunked prefill): a memory-bound decode step leaves
compute idle, and a prefill chunk riding in the same forward pass shares its weight reads. The
suite runs one flattened batch of B decode tokens and c chunk tokens through every linear layer
together (the weights are streamed once), decode attention over each request's C cached keys and
causal chunk attention over the chunk's prefix p plus itself, for c = 0 and a grid of chunk sizes.
A hinge fit t(c) = t0 + s·max(0, c − h) (harness.model.mixed_step.fit_hinge) gives the hidden
prefill tokens per decode step h, measured, beside the model's prediction for the same device
(idle compute of the roofline step / prefill compute per token); every case of one sweep carries both.

Counted work per case (the model's own accounting, harness.model.forward):
    FLOPs = decode_step_work(B, C).flops + prefill_work(c, p).flops
    bytes = weights once + B·C·kv/token (decode KV read) + c·kv/token (chunk KV write) + p·kv/token (prefix read)
GPU: Qwen3-8B bf16, B = 32 at C = 2048 (quick) or 8704 (the chapter's mean context); CPU: the tiny
configuration in fp32 (its weights sit in the last-level cache, so its "memory" time is a cache figure).
Every step reads static inputs and is timed as a CUDA graph replay on the GPU (microbench.graph_step):
eager launches would add a per-step host overhead that grows with c and bias the hinge.
"""

from __future__ import annotations

from typing import Any, Iterator

from harness.model.forward import decode_step_work, prefill_work
from harness.model.kv import kv_bytes_per_token
from harness.model.mixed_step import fit_hinge
from harness.specs.models import ModelSpec, get_model
from harness.units import dtype_bytes
from microbench.backends import Backend
from microbench.case import CaseResult, Peak, Skip, Work
from microbench.graph_step import time_step
from microbench.suite import Item, Planned, SuiteContext
from microbench.transformer import TINY, RandomDecoder

NAME = "mixed_step"
DESCRIPTION = "decode step of batch B plus a prefill chunk of c tokens: step time vs c, hidden prefill tokens per step (§9.2.3, §19.11)"


def mixed_inputs(d: RandomDecoder, batch: int, context: int, chunk: int, chunk_prefix: int = 0) -> tuple[Any, Any, Any]:
    """Static (ids [B + c], decode position [1], chunk positions [c]) of one mixed step, made once per shape on the
    device: the step then launches no host→device copy and can be captured into a CUDA graph."""
    key = ("mixed", batch, context, chunk, chunk_prefix)
    if key not in d._inputs:
        t = d.t
        ids = t.randint(0, d.m.vocab_size, (batch + chunk,), generator=d._gen, device=d.device)
        pos_d = t.full((1,), context - 1, dtype=t.long, device=d.device)
        pos_c = t.arange(chunk_prefix, chunk_prefix + chunk, device=d.device)
        d._inputs[key] = (ids, pos_d, pos_c)
    return d._inputs[key]


def mixed_forward(d: RandomDecoder, batch: int, context: int, chunk: int, chunk_prefix: int = 0, mask: Any = None) -> Any:
    """One mixed step: B decode tokens (one per request, at `context` keys) and `chunk` prefill tokens of one
    more request (cache row B) after `chunk_prefix` already-prefilled tokens; logits for the B decode rows
    and the chunk's last token. Inputs are the static ones of `mixed_inputs`."""
    t, m = d.t, d.m
    F = t.nn.functional
    H, nh, nkv, hd = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim
    p, c, B = chunk_prefix, chunk, batch
    ids, pos_d, pos_c = mixed_inputs(d, batch, context, chunk, chunk_prefix)
    with t.inference_mode():
        x = d.embed[ids]  # [B + c, H]: the flattened batch every linear layer sees once
        for li in range(m.n_layers):
            lw = d.layers[li]
            qkv = d._rms(x, lw["n1"]) @ lw["wqkv"]
            q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], -1)
            kc, vc = d.k_cache[li], d.v_cache[li]
            qd = d._rope(q[:B].view(B, 1, nh, hd).transpose(1, 2), pos_d)
            kc[:B, :, context - 1:context] = d._rope(k[:B].view(B, 1, nkv, hd).transpose(1, 2), pos_d)
            vc[:B, :, context - 1:context] = v[:B].view(B, 1, nkv, hd).transpose(1, 2)
            att = F.scaled_dot_product_attention(qd, kc[:B, :, :context], vc[:B, :, :context], enable_gqa=True)
            parts = [att.transpose(1, 2).reshape(B, nh * hd)]
            if c:
                qc = d._rope(q[B:].view(1, c, nh, hd).transpose(1, 2), pos_c)
                kc[B:B + 1, :, p:p + c] = d._rope(k[B:].view(1, c, nkv, hd).transpose(1, 2), pos_c)
                vc[B:B + 1, :, p:p + c] = v[B:].view(1, c, nkv, hd).transpose(1, 2)
                if p == 0:
                    ac = F.scaled_dot_product_attention(qc, kc[B:B + 1, :, :c], vc[B:B + 1, :, :c], is_causal=True, enable_gqa=True)
                else:
                    ac = F.scaled_dot_product_attention(qc, kc[B:B + 1, :, :p + c], vc[B:B + 1, :, :p + c], attn_mask=mask, enable_gqa=True)
                parts.append(ac.transpose(1, 2).reshape(c, nh * hd))
            x = x + t.cat(parts) @ lw["wo"] if c else x + parts[0] @ lw["wo"]
            g, u = (d._rms(x, lw["n2"]) @ lw["wgu"]).chunk(2, -1)
            x = x + (F.silu(g) * u) @ lw["wd"]
        rows = t.cat([x[:B], x[-1:]]) if c else x
        return d._rms(rows, d.norm) @ d.head


def chunk_mask(torch: Any, device: str, chunk: int, prefix: int) -> Any:
    """Boolean mask [c, p + c]: chunk token i sees the prefix and chunk tokens up to itself."""
    q = torch.arange(chunk, device=device).unsqueeze(1)
    k = torch.arange(prefix + chunk, device=device).unsqueeze(0)
    return k <= q + prefix


def mixed_work(m: ModelSpec, batch: int, context: int, chunk: int, prefix: int, elem_bytes: float) -> Work:
    dw = decode_step_work(m, batch, context, elem_bytes, elem_bytes)
    if not chunk:
        return Work(dw.flops, dw.bytes)
    pw = prefill_work(m, chunk, prefix, elem_bytes, elem_bytes)
    return Work(dw.flops + pw.flops, dw.bytes + pw.kv_write_bytes + pw.kv_read_bytes)


def model_hidden_tokens(m: ModelSpec, batch: int, context: int, elem_bytes: float, peak: Peak) -> float | None:
    """The model's h for this device: (bytes/BW − FLOPs/peak) of the decode step over prefill FLOPs per token / peak
    (§9.2.3: ≈490 on A100). Independent of a common efficiency η. None when a peak is unknown."""
    if not (peak.flops_per_s and peak.bytes_per_s):
        return None
    dw = decode_step_work(m, batch, context, elem_bytes, elem_bytes)
    L = 2048
    per_token_s = prefill_work(m, L, 0, elem_bytes, elem_bytes).flops / L / peak.flops_per_s
    idle = max(0.0, dw.bytes / peak.bytes_per_s - dw.flops / peak.flops_per_s)
    return idle / per_token_s


def plan_for(ctx: SuiteContext, b: Backend) -> tuple[ModelSpec, str, int, int, int, list[int]]:
    """(model, dtype, batch, context, chunk prefix, chunk sizes) per device and mode."""
    if b.is_cuda:
        m = get_model(ctx.options.get("model", "qwen3-8b"))
        if ctx.quick:
            return m, "bf16", 32, 2048, 0, [0, 128, 256, 512, 1024, 2048]
        return m, "bf16", 32, 8704, 0, [0, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048]
    if ctx.quick:
        return TINY, "fp32", 8, 256, 0, [0, 16, 64, 256]
    return TINY, "fp32", 8, 1024, 0, [0, 8, 16, 32, 64, 128, 256, 512]


def run_sweep(ctx: SuiteContext, b: Backend, m: ModelSpec, dtype: str, batch: int, context: int, prefix: int,
              chunks: list[int]) -> list[CaseResult]:
    """Measure every chunk size, fit the hinge, and attach the fit and the model's h to every case."""
    eb = dtype_bytes(dtype)
    t = b.module
    d = RandomDecoder(m, t, b.device, b.dtype_of(dtype), batch + 1, max(context, prefix + max(chunks)), ctx.seed)
    peak = b.peak(dtype)
    measured = []
    timings = {}
    for c in chunks:
        mask = chunk_mask(t, b.device, c, prefix) if (c and prefix) else None
        st = time_step(b, lambda c=c, mask=mask: mixed_forward(d, batch, context, c, prefix, mask), ctx.policy)
        timings[c] = st
        measured.append((c, st.primary))
    fit = fit_hinge([c for c, _ in measured], [mm.stats.median_s for _, mm in measured])
    h_model = model_hidden_tokens(m, batch, context, eb, peak)
    kv_tok = kv_bytes_per_token(m, eb)
    out = []
    for c, meas in measured:
        params = {
            "model": m.name, "batch": batch, "context_tokens": context, "chunk_tokens": c, "chunk_prefix_tokens": prefix,
            "kv_bytes_per_token": kv_tok, "chunks": chunks,
            "fit_base_step_s": fit.base_step_s, "fit_hidden_tokens": fit.hidden_tokens, "fit_per_token_s": fit.per_token_s,
            "fit_rms_residual_s": fit.rms_residual_s, "model_hidden_tokens": h_model,
            "extra_s_over_decode": meas.stats.median_s - fit.base_step_s, **timings[c].params(),
        }
        out.append(ctx.result(NAME, f"{m.name}-b{batch}-c{context}-chunk{c}", b, dtype, params,
                              mixed_work(m, batch, context, c, prefix, eb), meas, peak, notes=timings[c].notes))
    del d
    return out


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, b.label, "the mixed step is a torch forward pass; numpy has no attention kernel")
            continue
        m, dtype, batch, context, prefix, chunks = plan_for(ctx, b)
        yield Planned(NAME, f"{m.name}-b{batch}-c{context}-sweep",
                      lambda b=b, m=m, dtype=dtype, batch=batch, context=context, prefix=prefix, chunks=chunks:
                      run_sweep(ctx, b, m, dtype, batch, context, prefix, chunks))
