"""The time of one forward pass of a served batch on a GPU instance, operator by operator (the twin's step time).

A deviation from the chapter's whole-step roofline `max(F/C, W/B)` (§9.2.3), stated here and in docs/model.md:
a served step is a chain of kernels that run one after another, so its time is the **sum** over the
operators of each one's own roofline, `t_op = t_fixed + max(F_op/(η_c·peak_dtype), bytes_op/(η_b·BW))`.
Where one operator is memory-bound and the next compute-bound their times add; the whole-step max() lets
one hide the other. Per layer, per card of a tensor-parallel instance (harness.model.parallel):

- linear layers as GEMMs of M = the step's tokens (QKV / MLA projections, attention output, FFN gate-up and
  down, or the MoE router, the routed experts as one grouped GEMM over the experts the tokens touch —
  E·(1−(1−K/E)^T) of them, §9.3.3 — and the shared experts), at the peak of the precision's GEMM dtype
  (FP8 GEMMs at the FP8 peak: harness.model.precision);
- attention: prefill (query, key) pairs × FLOPs per pair (§9.2.3's exact causal count, capped at the window
  in sliding-window layers) at the BF16 peak; decode reads each sequence's KV (GQA: 1/tp of the heads, at
  least one; MLA: the whole latent on every card) and does the compact path's FLOPs;
- two all-reduces of `tokens × hidden × 2` bytes when tp > 1 (after the attention output and the FFN),
  `t = fixed + bytes / bytes_per_s` with the cards' measured constants, or the ring α–β bound on the pool's
  link when uncalibrated;
- three memory-bound element-wise kernels (two fused add+RMSNorm, the gated activation);
- once per pass: the vocabulary-parallel LM head over the sequences that sample a token, and a fixed
  per-pass overhead (0 unless measured).

The constants (`KernelConstants`) come from kernel measurements — imported kernel tables or our own
microbenchmarks — or, uncalibrated, from the datasheet at the chapter's 50 % (§9.2.3).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from harness.errors import HarnessError
from harness.model.forward import attention_pair_flops, expected_active_experts, param_counts
from harness.model.kernel_tables import AttentionKey, KernelTables, MoeKey
from harness.model.kv import kv_bytes_per_token
from harness.model.parallel import ACTIVATION_BYTES, Parallel, allreduce_time_s, check_parallel, kv_replication
from harness.model.precision import BF16_BYTES, Precision
from harness.model.stages import DEFAULT_EFFICIENCY
from harness.specs.gpus import GpuSpec
from harness.specs.models import ModelSpec

ELEMENTWISE_KERNELS_PER_LAYER = 3  # fused add+RMSNorm before attention and before the FFN, the gated activation


@dataclass(frozen=True, slots=True)
class GemmConstants:
    """One GEMM kernel family: compute efficiency at large M, weight-streaming efficiency at small M, fixed cost."""

    compute_efficiency: float = DEFAULT_EFFICIENCY  # of the dtype's datasheet peak
    bandwidth_efficiency: float = DEFAULT_EFFICIENCY  # of the HBM bandwidth
    fixed_s: float = 0.0  # per launch

    def __post_init__(self) -> None:
        _fraction("gemm.compute_efficiency", self.compute_efficiency)
        _fraction("gemm.bandwidth_efficiency", self.bandwidth_efficiency)
        _non_negative("gemm.fixed_s", self.fixed_s)


@dataclass(frozen=True, slots=True)
class AllReduceCost:
    """All-reduce over a fixed number of cards: t = fixed_s + bytes / bytes_per_s."""

    fixed_s: float
    bytes_per_s: float
    source: str = ""

    def __post_init__(self) -> None:
        _non_negative("allreduce.fixed_s", self.fixed_s)
        if not self.bytes_per_s > 0:
            raise HarnessError(f"allreduce.bytes_per_s must be > 0, got {self.bytes_per_s!r}.")

    def time_s(self, payload_bytes: float) -> float:
        return self.fixed_s + payload_bytes / self.bytes_per_s if payload_bytes > 0 else 0.0


@dataclass(frozen=True, slots=True)
class KernelConstants:
    """Per-operator constants of one GPU (and kernel family): what the step model needs measured."""

    gpu: str
    gemm: Mapping[str, GemmConstants] = field(default_factory=dict)  # by GEMM dtype ("bf16", "fp8"); missing -> default
    attention_compute_efficiency: float = DEFAULT_EFFICIENCY  # prefill attention FLOPs, of the BF16 peak
    attention_bandwidth_efficiency: float = DEFAULT_EFFICIENCY  # decode attention KV bytes, of the HBM bandwidth
    attention_fixed_s: float = 0.0  # per attention kernel (one per layer and phase)
    allreduce: Mapping[int, AllReduceCost] = field(default_factory=dict)  # by cards; missing -> the link's α–β
    elementwise_bandwidth_efficiency: float = DEFAULT_EFFICIENCY
    elementwise_fixed_s: float = 0.0
    step_overhead_s: float = 0.0  # per forward pass outside the kernels
    source: str = "UNCALIBRATED: datasheet peaks at the chapter's 50 % (Chapter 9, §9.2.3)"
    calibrated: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _fraction("attention_compute_efficiency", self.attention_compute_efficiency)
        _fraction("attention_bandwidth_efficiency", self.attention_bandwidth_efficiency)
        _fraction("elementwise_bandwidth_efficiency", self.elementwise_bandwidth_efficiency)
        for f in ("attention_fixed_s", "elementwise_fixed_s", "step_overhead_s"):
            _non_negative(f, getattr(self, f))

    def gemm_for(self, dtype: str) -> GemmConstants:
        if dtype in self.gemm:
            return self.gemm[dtype]
        fallback = {"fp8-block": "fp8"}.get(dtype, "bf16" if dtype.endswith("-wo") else None)
        if fallback in self.gemm:  # a family not measured: its nearest measured one (block-scaled FP8 -> FP8,
            return self.gemm[fallback]  # weight-only -> BF16, whose compute it runs)
        return GemmConstants()


def _fraction(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise HarnessError(f"kernel constants: {name} must be in (0, 1] (a fraction of datasheet peak), got {v!r}; "
                           "an efficiency above 100 % is a measurement or spec error.")


def _non_negative(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise HarnessError(f"kernel constants: {name} must be a number of seconds >= 0, got {v!r}.")


@dataclass(frozen=True, slots=True)
class ForwardBatch:
    """What one forward pass computes, summed over its sequences.

    tokens: new tokens in the pass (decode: 1 per sequence; prefill: the chunk); logits_rows: sequences that
    sample a token; prefill_pairs: attended (query, key) pairs of the prefill chunks (mean over layers);
    decode_keys: keys the decode queries attend to (mean over layers); decode_seqs / prefill_seqs: how many."""

    tokens: int
    logits_rows: int
    prefill_pairs: float = 0.0
    decode_keys: float = 0.0
    decode_seqs: int = 0
    prefill_seqs: int = 0


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Seconds of one forward pass by operator class (all layers), and their sum."""

    gemm_s: float
    attention_s: float
    allreduce_s: float
    elementwise_s: float
    lm_head_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.attention_s + self.allreduce_s + self.elementwise_s + self.lm_head_s + self.overhead_s


def sliding_pairs(new_tokens: int, cached_tokens: int, window: int) -> float:
    """Σ_{i=c+1}^{c+n} min(i, W): (query, key) pairs of a causal chunk in a layer that sees the last W tokens."""
    n, c, w = new_tokens, cached_tokens, window
    lo, hi = c + 1, c + n
    if hi <= w:
        return n * (lo + hi) / 2.0
    if lo > w:
        return float(n * w)
    below = w - lo + 1
    return below * (lo + w) / 2.0 + (hi - w) * w


def attended_pairs(m: ModelSpec, new_tokens: int, cached_tokens: int) -> float:
    """Causal (query, key) pairs of a chunk, as a mean over the layers (windowed layers capped at the window)."""
    full = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) / 2.0
    if not m.n_sliding_layers:
        return full
    win = sliding_pairs(new_tokens, cached_tokens, m.sliding_window)
    return ((m.n_layers - m.n_sliding_layers) * full + m.n_sliding_layers * win) / m.n_layers


@dataclass(frozen=True)
class GpuStepModel:
    """Forward-pass time of `model` on one instance of `parallel.gpus` cards of `gpu` (the StepTimes protocol of the twin)."""

    model: ModelSpec
    gpu: GpuSpec
    parallel: Parallel
    precision: Precision
    kv_bytes_per_elem: float = BF16_BYTES
    constants: KernelConstants | None = None
    link_bandwidth_bytes_per_s: float | None = None  # the cards' link, for the all-reduce when no constant is measured
    link_startup_latency_s: float = 5e-6
    tables: KernelTables | None = None  # measured kernel latencies; an operator they cover is read from them
    elementwise_kernels: int = ELEMENTWISE_KERNELS_PER_LAYER  # per layer; an engine that fuses the norms into its
    # all-reduce (TensorRT-LLM's residual + RMSNorm all-reduce fusion) runs fewer
    _cache: Any = field(init=False, repr=False, compare=False)
    _shapes: Any = field(init=False, repr=False, compare=False)
    curve_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # for the twin's decode stretches

    def __post_init__(self) -> None:
        check_parallel(self.model, self.parallel)
        if self.parallel.pp > 1:
            raise HarnessError(f"pp = {self.parallel.pp}: pipeline-parallel serving is not modelled by the step model; give pp = 1.")
        if self.parallel.attention_dp > 1:
            raise HarnessError("attention_dp > 1 (data-parallel attention) is not modelled by the step model; give attention_dp = 1.")
        if self.constants is None:
            object.__setattr__(self, "constants", KernelConstants(self.gpu.name))
        object.__setattr__(self, "_cache", lru_cache(maxsize=1 << 17)(self._total_uncached))
        measured_ar = self.parallel.tp in self.constants.allreduce or (self.tables is not None and self.parallel.tp in self.tables.allreduce)
        if self.parallel.tp > 1 and not measured_ar and not self.link_bandwidth_bytes_per_s:
            raise HarnessError(f"TP{self.parallel.tp} needs the cards' link for its all-reduces: no measured all-reduce for "
                               f"{self.parallel.tp} cards of {self.gpu.name} and no link given.")
        object.__setattr__(self, "_shapes", _layer_shapes(self.model, self.parallel, self.kv_bytes_per_elem))

    # ---- the StepTimes protocol (harness.target.step_times) and the richer batch form

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        n, c = int(prompt_tokens), int(cached_tokens)
        return self.batch_time_s(ForwardBatch(n, 1, attended_pairs(self.model, n, c), 0.0, 0, 1))

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        b = int(batch)
        return self.batch_time_s(ForwardBatch(b, b, 0.0, b * self.model.attended_tokens(float(context_tokens) + 1.0), b, 0))

    def mixed_step_time_s(self, decode_batch: int, context_tokens: float, prefill_tokens: int, cached_tokens: int = 0) -> float:
        b, n = int(decode_batch), int(prefill_tokens)
        keys = b * self.model.attended_tokens(float(context_tokens) + 1.0)
        return self.batch_time_s(ForwardBatch(b + n, b + 1, attended_pairs(self.model, n, int(cached_tokens)), keys, b, 1))

    def batch_time_s(self, fb: ForwardBatch) -> float:
        """Seconds of one forward pass (memoised on the batch rounded to 1 % of its attention work)."""
        return self._cache(fb.tokens, fb.logits_rows, _round_rel(fb.prefill_pairs), _round_rel(fb.decode_keys),
                           fb.decode_seqs, fb.prefill_seqs)

    def _total_uncached(self, *key: Any) -> float:
        return self.breakdown(ForwardBatch(*key)).total_s

    @property
    def source(self) -> str:
        src = self.tables.source if self.tables is not None else self.constants.source
        return f"{src}; {self.model.name} {self.precision.name} {self.parallel.describe()} on {self.gpu.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "gpu-step-model", "model": self.model.name, "gpu": self.gpu.name, "parallel": self.parallel.describe(),
                "precision": self.precision.name, "kv_bytes_per_elem": self.kv_bytes_per_elem, "source": self.source}

    # ---- the operators

    def _gemm_s(self, m_rows: float, n: float, k: float, weight_bytes: float, dtype: str, act_bytes: float,
                peak: float) -> float:
        if m_rows <= 0 or n <= 0 or k <= 0:
            return 0.0
        if self.tables is not None:
            t = self.tables.gemm_s(dtype, m_rows, n, k)
            if t is not None:
                return t
        g = self.constants.gemm_for(dtype)
        flops = 2.0 * m_rows * n * k
        nbytes = n * k * weight_bytes + m_rows * k * act_bytes + m_rows * n * BF16_BYTES
        return g.fixed_s + max(flops / (g.compute_efficiency * peak), nbytes / (g.bandwidth_efficiency * self.gpu.hbm_bandwidth_bytes_per_s))

    def _allreduce_s(self, payload_bytes: float, cards: int) -> float:
        if cards <= 1:
            return 0.0
        if self.tables is not None:
            t = self.tables.allreduce_s(cards, payload_bytes)
            if t is not None:
                return t
        cost = self.constants.allreduce.get(cards)
        if cost is not None:
            return cost.time_s(payload_bytes)
        return allreduce_time_s(payload_bytes, cards, self.link_bandwidth_bytes_per_s or 0.0, self.link_startup_latency_s)

    def breakdown(self, fb: ForwardBatch) -> StepBreakdown:
        m, gpu, par, prec, c = self.model, self.gpu, self.parallel, self.precision, self.constants
        t = float(fb.tokens)
        if t <= 0:
            raise HarnessError(f"a forward pass needs at least one token, got {fb.tokens!r}.")
        dense_dt, exp_dt = prec.gemm_kernel, prec.expert_gemm_kernel
        peak_l = prec.gemm_peak_flops_per_s(gpu)
        peak_e = prec.gemm_peak_flops_per_s(gpu, experts=True) if m.is_moe else peak_l
        act_l = 1.0 if prec.gemm_dtype == "fp8" else BF16_BYTES
        act_e = 1.0 if prec.expert_gemm_dtype == "fp8" else BF16_BYTES
        wb, wbe = prec.weight_bytes_per_param, prec.expert_weight_bytes_per_param
        sh = self._shapes

        # linear layers of one layer (per card)
        attn_lin = sum(self._gemm_s(t, n, k, BF16_BYTES if repl else wb, "bf16" if repl else dense_dt,
                                    BF16_BYTES if repl else act_l, gpu.peak_bf16_flops_per_s if repl else peak_l)
                       for n, k, repl in sh.attention)
        dense_ffn = sum(self._gemm_s(t, n, k, wb, dense_dt, act_l, peak_l) for n, k in sh.dense_ffn)
        moe = 0.0
        if m.is_moe:
            moe += self._gemm_s(t, m.n_routed_experts, m.hidden_size, BF16_BYTES, "bf16", BF16_BYTES, gpu.peak_bf16_flops_per_s)
            moe += sum(self._gemm_s(t, n, k, wb, dense_dt, act_l, peak_l) for n, k in sh.shared_ffn)
            moe += self._experts_s(t, wbe, exp_dt, act_e, peak_e)
        gemm = m.n_layers * attn_lin + (m.n_layers - m.n_moe_layers) * dense_ffn + m.n_moe_layers * moe

        # attention
        attn = 0.0
        tab = self._attention_from_tables(fb)
        if tab is not None:
            attn, pairs_left, keys_left = tab
        else:
            pairs_left, keys_left = fb.prefill_pairs, fb.decode_keys
        if pairs_left > 0:
            f = pairs_left * attention_pair_flops(m, "prefill") * m.n_layers / par.tp
            kv_w = t * sh.kv_bytes_per_token_card
            attn += max(f / (c.attention_compute_efficiency * gpu.peak_bf16_flops_per_s),
                        kv_w / (c.attention_bandwidth_efficiency * gpu.hbm_bandwidth_bytes_per_s))
            attn += m.n_layers * c.attention_fixed_s
        if keys_left > 0:
            f = keys_left * attention_pair_flops(m, "decode") * m.n_layers / par.tp
            kv_r = keys_left * sh.kv_bytes_per_token_card
            attn += max(f / (c.attention_compute_efficiency * gpu.peak_bf16_flops_per_s),
                        kv_r / (c.attention_bandwidth_efficiency * gpu.hbm_bandwidth_bytes_per_s))
            attn += m.n_layers * c.attention_fixed_s

        # communication: two all-reduces per layer over the instance's cards, one after the embedding
        ar_bytes = t * m.hidden_size * ACTIVATION_BYTES
        allreduce = (2 * m.n_layers + 1) * self._allreduce_s(ar_bytes, par.tp)

        # element-wise kernels: add+RMSNorm read the residual and the output and write both; the activation reads the
        # gate-up output and writes half of it
        h = m.hidden_size
        ffn_width = sh.ffn_width_card
        ew_bytes = 2 * (4 * t * h * BF16_BYTES) + 3 * t * ffn_width * BF16_BYTES
        elementwise = m.n_layers * (ew_bytes / (c.elementwise_bandwidth_efficiency * gpu.hbm_bandwidth_bytes_per_s)
                                    + self.elementwise_kernels * c.elementwise_fixed_s)

        if self.tables is not None and self.tables.smallest_kernel_s is not None:
            elementwise += m.n_layers * self.elementwise_kernels * self.tables.smallest_kernel_s
        lm_head = self._gemm_s(max(1, fb.logits_rows), m.vocab_size / par.tp, h, BF16_BYTES, "bf16", BF16_BYTES,
                               gpu.peak_bf16_flops_per_s)
        return StepBreakdown(gemm, attn, allreduce, elementwise, lm_head, c.step_overhead_s)

    def _attention_from_tables(self, fb: ForwardBatch) -> tuple[float, float, float] | None:
        """(seconds, prefill pairs left, decode keys left) of the attention the tables cover (GQA only; MLA's kernels
        are other tables), per layer × layers: decode at the mean attended context, prefill at the prompt length with
        as many (query, key) pairs as the chunks have."""
        m, par = self.model, self.parallel
        if self.tables is None:
            return None
        if m.attention == "mla":
            return self._mla_from_tables(fb)
        key = AttentionKey(m.n_heads // par.tp, max(1, m.n_kv_heads // par.tp), m.head_dim,
                           "fp8" if self.kv_bytes_per_elem == 1.0 else "bf16")
        t, pairs_left, keys_left = 0.0, fb.prefill_pairs, fb.decode_keys
        if fb.decode_seqs > 0 and fb.decode_keys > 0:
            d = self.tables.attention_s("decode", key, fb.decode_seqs, fb.decode_keys / fb.decode_seqs)
            if d is not None:
                t += m.n_layers * d
                keys_left = 0.0
        if fb.prefill_seqs > 0 and fb.prefill_pairs > 0:
            isl = max(1.0, (2.0 * fb.prefill_pairs / fb.prefill_seqs) ** 0.5)
            p = self.tables.attention_s("prefill", key, fb.prefill_seqs, isl)
            if p is not None:
                t += m.n_layers * p
                pairs_left = 0.0
        return t, pairs_left, keys_left

    def _mla_from_tables(self, fb: ForwardBatch) -> tuple[float, float, float] | None:
        m, t = self.model, self.tables
        heads = max(1, m.n_heads // self.parallel.tp)
        out, pairs_left, keys_left = 0.0, fb.prefill_pairs, fb.decode_keys
        if fb.decode_seqs > 0 and fb.decode_keys > 0:
            d = t.mla_s("decode", heads, fb.decode_seqs, fb.decode_keys / fb.decode_seqs)
            if d is not None:
                out += m.n_layers * d
                keys_left = 0.0
        if fb.prefill_seqs > 0 and fb.prefill_pairs > 0:
            isl = max(1.0, (2.0 * fb.prefill_pairs / fb.prefill_seqs) ** 0.5)
            p = t.mla_s("prefill", heads, fb.prefill_seqs, isl)
            if p is not None:
                out += m.n_layers * p
                pairs_left = 0.0
        return out, pairs_left, keys_left

    def _experts_s(self, t: float, wbe: float, dtype: str, act_bytes: float, peak: float) -> float:
        """The routed experts of one MoE layer on one card: a grouped GEMM over the experts the step's tokens touch."""
        m, par = self.model, self.parallel
        if self.tables is not None:
            key = MoeKey(self.precision.name, m.hidden_size, m.moe_intermediate_size, m.n_experts_per_token,
                         m.n_routed_experts, par.expert_tp, par.ep)
            got = self.tables.moe_s(key, t)
            if got is None and key.dtype == "fp8":
                got = self.tables.moe_s(dataclasses.replace(key, dtype="fp8-block"), t)
            if got is not None:
                return got
        g = self.constants.gemm_for(dtype)
        width = m.moe_intermediate_size / par.expert_tp
        per_expert_params = 3 * m.hidden_size * width
        touched = expected_active_experts(m.n_routed_experts, m.n_experts_per_token, t) / par.ep
        assignments = t * m.n_experts_per_token / par.ep
        flops = 2.0 * assignments * per_expert_params
        nbytes = touched * per_expert_params * wbe + assignments * (m.hidden_size * act_bytes + 3 * width * BF16_BYTES)
        return 2 * g.fixed_s + max(flops / (g.compute_efficiency * peak), nbytes / (g.bandwidth_efficiency * self.gpu.hbm_bandwidth_bytes_per_s))


def _round_rel(x: float) -> float:
    """x rounded to ~1 % (a memo key): attention work varies smoothly with the context."""
    if x <= 0:
        return 0.0
    e = 10 ** (len(str(int(x))) - 2)
    return float(round(x / e) * e)


@dataclass(frozen=True, slots=True)
class _Shapes:
    attention: tuple[tuple[float, float, bool], ...]  # (N, K, replicated) per card
    dense_ffn: tuple[tuple[float, float], ...]
    shared_ffn: tuple[tuple[float, float], ...]
    ffn_width_card: float
    kv_bytes_per_token_card: float  # all layers, replication counted


def _layer_shapes(m: ModelSpec, par: Parallel, kv_bytes_per_elem: float) -> _Shapes:
    tp = par.tp
    h = m.hidden_size
    if m.attention == "gqa":
        kv_heads = max(1.0, m.n_kv_heads / tp)
        att = ((m.n_heads / tp + 2 * kv_heads) * m.head_dim, h, False), (h, m.n_heads * m.head_dim / tp, False)
    else:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = ((m.q_lora_rank, h, True), (m.n_heads / tp * qk, m.q_lora_rank, False)) if m.q_lora_rank else \
            ((m.n_heads / tp * qk, h, False),)
        att = (*q, (m.kv_lora_rank + m.qk_rope_head_dim, h, True),
               (m.n_heads / tp * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, False),
               (h, m.n_heads / tp * m.v_head_dim, False))
    dense = ((2 * m.intermediate_size / tp, h), (h, m.intermediate_size / tp)) if m.intermediate_size else ()
    shared_i = m.n_shared_experts * m.shared_expert_intermediate_size
    shared = ((2 * shared_i / tp, h), (h, shared_i / tp)) if m.is_moe and shared_i else ()
    if m.is_moe:
        width = (m.n_experts_per_token * m.moe_intermediate_size / par.expert_tp + shared_i / tp)
    else:
        width = m.intermediate_size / tp
    return _Shapes(att, dense, shared, 2 * width, kv_bytes_per_token_card(m, par, kv_bytes_per_elem))


def kv_bytes_per_token_card(m: ModelSpec, par: Parallel, kv_bytes_per_elem: float) -> float:
    """KV bytes one card of the instance keeps per token of context (all layers; replication counted)."""
    return kv_bytes_per_token(m, kv_bytes_per_elem) * kv_replication(m, par.tp) / par.tp


def weight_bytes_per_card(m: ModelSpec, par: Parallel, prec: Precision) -> float:
    """Resident weight bytes on one card: linear layers split over tp (experts over ep × moe_tp), embeddings and LM
    head vocabulary-parallel, MLA's down projections and the router replicated."""
    pc = param_counts(m)
    tp = par.tp
    n_dense = m.n_layers - m.n_moe_layers
    attn = pc.attention_per_layer
    repl = 0.0
    if m.attention == "mla":
        repl = m.hidden_size * (m.kv_lora_rank + m.qk_rope_head_dim) + (m.hidden_size * m.q_lora_rank if m.q_lora_rank else 0)
    linear = m.n_layers * ((attn - repl) / tp) + n_dense * pc.dense_ffn_per_layer / tp
    replicated = m.n_layers * repl + m.n_moe_layers * pc.router_per_layer + pc.norms
    experts = m.n_moe_layers * m.n_routed_experts * pc.expert / (par.ep * par.expert_tp) if m.is_moe else 0.0
    shared = m.n_moe_layers * pc.shared_experts_per_layer / tp
    vocab = (pc.embedding + pc.lm_head) / tp
    return ((linear + shared) * prec.weight_bytes_per_param + experts * prec.expert_weight_bytes_per_param
            + (replicated + vocab) * BF16_BYTES)
