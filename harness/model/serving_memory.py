"""HBM of one card of a serving instance: weights, activations, the engine's reserve, and what is left for KV.

The KV cache an engine can hold caps its running batch (§9.7.2's capacity check, made per card): each card keeps
its share of the weights (harness.model.gpu_step.weight_bytes_per_card) and of every token's KV
(kv_bytes_per_token_card: 1/tp of the GQA heads, at least one head; MLA's whole latent), the activations of the
largest step (the engine profiles one step of its token budget before sizing the cache), and a runtime reserve
(CUDA context, NCCL buffers, CUDA graphs). The engine hands a fraction of the card to weights + KV (vLLM's
gpu_memory_utilization, SGLang's mem_fraction_static) or a fraction of what is free after the weights to KV
(TensorRT-LLM's free_gpu_memory_fraction); `usable_fraction` and `fraction_of` say which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import HarnessError
from harness.model.gpu_step import kv_bytes_per_token_card, weight_bytes_per_card
from harness.model.parallel import Parallel
from harness.model.precision import BF16_BYTES, Precision
from harness.specs.gpus import GpuSpec
from harness.specs.models import ModelSpec

GiB = 1024**3


@dataclass(frozen=True, slots=True)
class ServingMemory:
    hbm_bytes_per_card: float
    weight_bytes_per_card: float
    activation_bytes_per_card: float
    runtime_bytes_per_card: float
    kv_bytes_per_card: float
    kv_bytes_per_token_card: float
    kv_tokens: float  # per instance: the tokens of context all its running requests can hold together
    usable_fraction: float
    fraction_of: str  # "card" or "free after weights"

    def describe(self) -> str:
        return (f"per card: {self.hbm_bytes_per_card / GiB:.1f} GiB HBM, weights {self.weight_bytes_per_card / GiB:.1f} GiB, "
                f"activations {self.activation_bytes_per_card / GiB:.1f} GiB, runtime {self.runtime_bytes_per_card / GiB:.1f} GiB, "
                f"KV {self.kv_bytes_per_card / GiB:.1f} GiB ({self.usable_fraction:g} of the {self.fraction_of}) = "
                f"{self.kv_tokens:,.0f} tokens of context per instance")


def activation_bytes_per_card(m: ModelSpec, par: Parallel, step_tokens: int, max_batch: int) -> float:
    """Peak activations of one step of `step_tokens` tokens: the widest layer's inputs and outputs (QKV, gate-up) in
    BF16 plus FP32 logits for `max_batch` sampled sequences over the card's share of the vocabulary."""
    tp = par.tp
    qkv = (m.n_heads + 2 * max(1, m.n_kv_heads)) * m.head_dim / tp
    ffn = 2 * (m.intermediate_size if not m.is_moe else max(m.intermediate_size, m.n_experts_per_token * m.moe_intermediate_size)) / tp
    per_token = (4 * m.hidden_size + qkv + 1.5 * ffn) * BF16_BYTES
    logits = max_batch * m.vocab_size / tp * 4.0
    return step_tokens * per_token + logits


def serving_memory(m: ModelSpec, gpu: GpuSpec, par: Parallel, prec: Precision, kv_bytes_per_elem: float, *,
                   usable_fraction: float, fraction_of: Literal["card", "free after weights"], step_tokens: int,
                   max_batch: int, runtime_bytes_per_card: float) -> ServingMemory:
    """The KV room of one instance; a model that leaves no room is refused with the fix (more cards per instance)."""
    hbm = gpu.hbm_capacity_bytes
    w = weight_bytes_per_card(m, par, prec)
    act = activation_bytes_per_card(m, par, step_tokens, max_batch)
    if fraction_of == "card":
        kv = usable_fraction * hbm - w - act - runtime_bytes_per_card
    else:
        kv = usable_fraction * (hbm - w - act - runtime_bytes_per_card)
    per_tok = kv_bytes_per_token_card(m, par, kv_bytes_per_elem)
    if w > hbm or kv <= 0:
        need = w + act + runtime_bytes_per_card
        more = [t for t in (2, 4, 8) if t > par.tp and m.n_heads % t == 0]
        raise HarnessError(
            f"model {m.name} in {prec.name} does not fit {gpu.name} at tp = {par.tp}: weights {w / GiB:.1f} GiB + activations "
            f"{act / GiB:.1f} GiB + runtime {runtime_bytes_per_card / GiB:.1f} GiB = {need / GiB:.1f} GiB per card leave no room "
            f"for KV in {hbm / GiB:.1f} GiB × {usable_fraction:g}; give a larger tp"
            + (f" (e.g. {more[0]})" if more else "") + " or a smaller precision (fp8).")
    return ServingMemory(hbm, w, act, runtime_bytes_per_card, kv, per_tok, kv / per_tok, usable_fraction, fraction_of)
