"""Forward-pass accounting: FLOPs and bytes of a prefill and of one batched decode step.

Chapter 9, §9.2.3 (work per request): matmul FLOPs count 2 per multiply-add; causal attention is
counted exactly (query i attends to i keys); logits only for the last input token in prefill; a
cached prefix contributes attention context but no new projections. Decode step at batch B uses
the mean context L + (G-1)/2. With Qwen3-8B BF16 this gives 133.6 TFLOPs for an 8192-token
prefill and, at B=32, 15.1 GB of weights + 41.1 GB of KV and 0.65 TFLOPs per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.model.kv import kv_bytes_per_token
from harness.specs.models import ModelSpec


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameter counts (elements, not bytes)."""

    embedding: int
    lm_head: int  # 0 extra storage when tied, but the logits matmul still reads V*H
    attention_per_layer: int
    dense_ffn_per_layer: int
    expert: int  # one routed expert
    shared_experts_per_layer: int
    router_per_layer: int
    norms: int
    total: int  # resident parameters


def param_counts(m: ModelSpec) -> ParamCounts:
    H = m.hidden_size
    if m.attention == "gqa":
        attn = H * m.n_heads * m.head_dim + 2 * H * m.n_kv_heads * m.head_dim + m.n_heads * m.head_dim * H
    else:
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (H * m.q_lora_rank + m.q_lora_rank * m.n_heads * qk_head) if m.q_lora_rank else H * m.n_heads * qk_head
        kv_a = H * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv_b = m.kv_lora_rank * m.n_heads * (m.qk_nope_head_dim + m.v_head_dim)
        o = m.n_heads * m.v_head_dim * H
        attn = q + kv_a + kv_b + o
    dense_ffn = 3 * H * m.intermediate_size
    expert = 3 * H * m.moe_intermediate_size if m.is_moe else 0
    shared = m.n_shared_experts * 3 * H * m.shared_expert_intermediate_size if m.is_moe else 0
    router = H * m.n_routed_experts if m.is_moe else 0
    embedding = m.vocab_size * H
    lm_head = 0 if m.tie_word_embeddings else m.vocab_size * H
    norms = m.n_layers * 2 * H + H
    n_dense = m.n_layers - m.n_moe_layers
    total = (
        embedding + lm_head + norms + m.n_layers * attn + n_dense * dense_ffn
        + m.n_moe_layers * (m.n_routed_experts * expert + shared + router)
    )
    return ParamCounts(embedding, lm_head, attn, dense_ffn, expert, shared, router, norms, total)


def expected_active_experts(n_experts: int, top_k: int, tokens: float) -> float:
    """E[U] = E·(1-(1-K/E)^M): distinct experts touched by M tokens under uniform routing (§9.3.3)."""
    if n_experts <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


def linear_flops_per_token(m: ModelSpec) -> float:
    """2·(active linear parameters) per token, without logits."""
    pc = param_counts(m)
    n_dense = m.n_layers - m.n_moe_layers
    active = (
        m.n_layers * pc.attention_per_layer + n_dense * pc.dense_ffn_per_layer
        + m.n_moe_layers * (m.n_experts_per_token * pc.expert + pc.shared_experts_per_layer + pc.router_per_layer)
    )
    return 2.0 * active


def logits_flops_per_token(m: ModelSpec) -> float:
    return 2.0 * m.hidden_size * m.vocab_size


def attention_pair_flops(m: ModelSpec, phase: str) -> float:
    """FLOPs for one (query, key) pair in one layer: QK^T plus the weighted sum of V.

    GQA: 4·h_q·d_h. MLA prefill uses the expanded heads, 2·h·(d_nope+d_r) + 2·h·d_v; MLA decode
    uses the compact (absorbed) path over the latent, 2·h·(d_c+d_r) + 2·h·d_c (§9.2.3).
    """
    if m.attention == "gqa":
        return 4.0 * m.n_heads * m.head_dim
    if phase == "prefill":
        return 2.0 * m.n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) + 2.0 * m.n_heads * m.v_head_dim
    return 2.0 * m.n_heads * (m.kv_lora_rank + m.qk_rope_head_dim) + 2.0 * m.n_heads * m.kv_lora_rank


def causal_pairs(new_tokens: int, cached_tokens: int = 0) -> int:
    """Σ_{i=c+1}^{c+n} i: (query, key) pairs when n new tokens follow c cached ones."""
    n, c = new_tokens, cached_tokens
    return n * c + n * (n + 1) // 2


def weight_bytes_read(m: ModelSpec, tokens_in_step: float, weight_bytes_per_param: float) -> float:
    """Weight bytes one forward step streams: all non-embedding weights plus the LM head;
    for MoE only the experts the step's tokens touch (uniform routing, §9.3.3)."""
    pc = param_counts(m)
    n_dense = m.n_layers - m.n_moe_layers
    head = m.vocab_size * m.hidden_size  # the logits matmul reads V·H, tied or not
    params = pc.norms + head + m.n_layers * pc.attention_per_layer + n_dense * pc.dense_ffn_per_layer
    if m.is_moe:
        active = expected_active_experts(m.n_routed_experts, m.n_experts_per_token, tokens_in_step)
        params += m.n_moe_layers * (active * pc.expert + pc.shared_experts_per_layer + pc.router_per_layer)
    return params * weight_bytes_per_param


@dataclass(frozen=True, slots=True)
class PrefillWork:
    new_tokens: int
    cached_tokens: int
    linear_flops: float
    attention_flops: float
    logits_flops: float
    flops: float
    weight_bytes: float
    kv_write_bytes: float
    kv_read_bytes: float
    bytes: float


def prefill_work(
    m: ModelSpec, new_tokens: int, cached_tokens: int, weight_bytes_per_param: float, kv_bytes_per_elem: float
) -> PrefillWork:
    if new_tokens <= 0:
        raise HarnessError(
            f"prefill needs at least one new token, got new_tokens={new_tokens}; "
            "set cached_prefix_tokens below input_tokens (the last input token is always recomputed)."
        )
    lin = linear_flops_per_token(m) * new_tokens
    attn = causal_pairs(new_tokens, cached_tokens) * attention_pair_flops(m, "prefill") * m.n_layers
    logits = logits_flops_per_token(m)
    kv_tok = kv_bytes_per_token(m, kv_bytes_per_elem)
    w = weight_bytes_read(m, new_tokens, weight_bytes_per_param)
    kv_w = new_tokens * kv_tok
    kv_r = cached_tokens * kv_tok
    return PrefillWork(new_tokens, cached_tokens, lin, attn, logits, lin + attn + logits, w, kv_w, kv_r, w + kv_w + kv_r)


@dataclass(frozen=True, slots=True)
class DecodeStepWork:
    batch: int
    context_tokens: float  # mean keys attended per request
    flops: float
    weight_bytes: float
    kv_read_bytes: float
    bytes: float
    attn_flops: float = 0.0  # the attention's share of `flops`


def decode_step_work(
    m: ModelSpec, batch: int, context_tokens: float, weight_bytes_per_param: float, kv_bytes_per_elem: float
) -> DecodeStepWork:
    """One decode call generating one token for each of `batch` requests at mean context `context_tokens`."""
    if batch <= 0:
        raise HarnessError(f"decode batch must be a positive integer, got {batch!r}.")
    per_tok = linear_flops_per_token(m) + logits_flops_per_token(m)
    attn = batch * context_tokens * attention_pair_flops(m, "decode") * m.n_layers
    w = weight_bytes_read(m, batch, weight_bytes_per_param)
    kv = batch * context_tokens * kv_bytes_per_token(m, kv_bytes_per_elem)
    return DecodeStepWork(batch, context_tokens, batch * per_tok + attn, w, kv, w + kv, attn)


def mean_decode_context(input_tokens: int, output_tokens: int) -> float:
    """L + (G-1)/2: mean keys per decode call over the G-1 calls (§9.2.3)."""
    return input_tokens + (output_tokens - 1) / 2.0
