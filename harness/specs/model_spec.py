"""The shape of a decoder-only transformer (ModelSpec): the record the catalog (harness.specs.models), the GGUF reader
(harness.specs.gguf_model) and the Hugging Face config reader all return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import non_negative_int, positive_int


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shape of a decoder-only transformer; enough to count FLOPs and bytes per forward pass."""

    name: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense FFN width (used by dense layers)
    vocab_size: int
    source: str
    attention: Literal["gqa", "mla"] = "gqa"
    tie_word_embeddings: bool = False
    # MLA (DeepSeek-V2/V3): latent d_c, rope d_r, and per-head nope/v dims
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    # MoE
    n_routed_experts: int = 0
    n_experts_per_token: int = 0
    moe_intermediate_size: int = 0
    n_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    n_dense_layers: int = 0  # layers with a dense FFN when the model is MoE
    # sliding-window attention (gpt-oss: every other layer attends to the last 128 tokens only)
    sliding_window: int = 0  # tokens a windowed layer attends to; 0: no windowed layers
    n_sliding_layers: int = 0  # how many of the layers are windowed (the rest attend to the whole context)

    def __post_init__(self) -> None:
        owner = f"model spec {self.name!r}"
        for f in ("n_layers", "hidden_size", "n_heads", "vocab_size"):
            positive_int(owner, f, getattr(self, f))
        if self.attention not in ("gqa", "mla"):
            raise HarnessError(f"{owner}: attention must be 'gqa' or 'mla', got {self.attention!r}.")
        if self.attention == "gqa":
            positive_int(owner, "n_kv_heads", self.n_kv_heads)
            positive_int(owner, "head_dim", self.head_dim)
            if self.n_heads % self.n_kv_heads:
                raise HarnessError(
                    f"{owner}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})."
                )
        else:
            for f in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                positive_int(owner, f, getattr(self, f))
        for f in (
            "intermediate_size", "q_lora_rank", "n_routed_experts", "n_experts_per_token",
            "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "n_dense_layers",
        ):
            non_negative_int(owner, f, getattr(self, f))
        if self.is_moe:
            positive_int(owner, "n_experts_per_token", self.n_experts_per_token)
            positive_int(owner, "moe_intermediate_size", self.moe_intermediate_size)
            if self.n_experts_per_token > self.n_routed_experts:
                raise HarnessError(
                    f"{owner}: n_experts_per_token ({self.n_experts_per_token}) exceeds "
                    f"n_routed_experts ({self.n_routed_experts}); a token cannot choose more experts than exist."
                )
            if self.n_dense_layers > self.n_layers:
                raise HarnessError(f"{owner}: n_dense_layers ({self.n_dense_layers}) exceeds n_layers ({self.n_layers}).")
        elif self.intermediate_size <= 0:
            raise HarnessError(f"{owner}: a dense model needs intermediate_size > 0, got {self.intermediate_size!r}.")
        non_negative_int(owner, "sliding_window", self.sliding_window)
        non_negative_int(owner, "n_sliding_layers", self.n_sliding_layers)
        if self.n_sliding_layers > self.n_layers:
            raise HarnessError(f"{owner}: n_sliding_layers ({self.n_sliding_layers}) exceeds n_layers ({self.n_layers}).")
        if bool(self.n_sliding_layers) != bool(self.sliding_window):
            raise HarnessError(f"{owner}: give sliding_window and n_sliding_layers together (got {self.sliding_window} and "
                               f"{self.n_sliding_layers}); 0 and 0 mean every layer attends to the whole context.")

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    def attended_tokens(self, context_tokens: float) -> float:
        """Keys one query attends to, summed over the layers and divided by n_layers: the whole context in a
        full-attention layer, at most `sliding_window` in a windowed one (a mean over layers, in tokens)."""
        if not self.n_sliding_layers:
            return context_tokens
        full = self.n_layers - self.n_sliding_layers
        return (full * context_tokens + self.n_sliding_layers * min(context_tokens, self.sliding_window)) / self.n_layers
