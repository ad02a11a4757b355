"""Model architecture specs: the catalog and a reader for Hugging Face ``config.json`` files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import non_negative_int, positive_int, unknown


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

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.is_moe else 0


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec(
            name="qwen3-8b", n_layers=36, hidden_size=4096, n_heads=32, n_kv_heads=8, head_dim=128,
            intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
            source="Qwen/Qwen3-8B config.json; Chapter 9 §9.2.2 (36 layers, 8 KV heads, head dim 128)",
        ),
        ModelSpec(
            name="qwen3-235b-a22b", n_layers=94, hidden_size=4096, n_heads=64, n_kv_heads=4, head_dim=128,
            intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
            n_routed_experts=128, n_experts_per_token=8, moe_intermediate_size=1536,
            source="Qwen/Qwen3-235B-A22B config.json (128 experts, top-8, expert FFN 1536); Chapter 9 §9.3",
        ),
        ModelSpec(
            name="deepseek-v3", n_layers=61, hidden_size=7168, n_heads=128, n_kv_heads=128, head_dim=192,
            intermediate_size=18432, vocab_size=129280, attention="mla", tie_word_embeddings=False,
            kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536,
            n_routed_experts=256, n_experts_per_token=8, moe_intermediate_size=2048, n_shared_experts=1,
            shared_expert_intermediate_size=2048, n_dense_layers=3,
            source="deepseek-ai/DeepSeek-V3 config.json; Chapter 9 §9.2.2 (61 layers, d_c=512, d_r=64)",
        ),
    ]
}


_MODEL_FILE_SUFFIXES = (".json", ".gguf")
_MODEL_PATHS_BASE: ContextVar[Path | None] = ContextVar("model_paths_base", default=None)


@contextmanager
def model_paths_relative_to(base_dir: Path | None) -> Iterator[None]:
    """While validating a scenario file, relative model file paths in it mean paths next to that file."""
    token = _MODEL_PATHS_BASE.set(base_dir)
    try:
        yield
    finally:
        _MODEL_PATHS_BASE.reset(token)


def resolve_model_ref(ref: str) -> str:
    """A catalog name unchanged; a relative model file path (a Hugging Face config.json) made absolute
    against the scenario file that names it (issue 18: it was resolved against the working directory)."""
    base = _MODEL_PATHS_BASE.get()
    if base is None or ref in MODELS or not ref.endswith(_MODEL_FILE_SUFFIXES) or Path(ref).is_absolute():
        return ref
    return str((base / ref).resolve())


def get_model(name: str) -> ModelSpec:
    """A catalog model by slug, or a model read from a path to a Hugging Face config.json or a GGUF file."""
    if name in MODELS:
        return MODELS[name]
    if name.endswith(".gguf"):  # llama.cpp's format: the shape from the file's metadata
        from harness.specs.gguf_model import model_spec_from_gguf  # noqa: PLC0415

        return model_spec_from_gguf(name)
    if name.endswith(".json") or "/" in name:
        return model_from_hf_config(name)
    raise unknown(
        "model spec", name, list(MODELS),
        "Or give the path to a Hugging Face config.json file.",
    )


def _req(cfg: dict, key: str, path: str) -> int:
    if key not in cfg:
        raise HarnessError(f"{path}: missing field {key!r}; a Hugging Face config.json of a decoder model has it.")
    return cfg[key]


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read dense, GQA, MoE and MLA fields from a Hugging Face ``config.json``."""
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"model config {str(p)!r} does not exist; give a catalog name ({', '.join(MODELS)}) or a config.json path.")
    try:
        cfg = json.loads(p.read_text())
    except UnicodeDecodeError:
        raise HarnessError(f"model config {str(p)!r} is not UTF-8 text (a binary file?); give the model's config.json.") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise HarnessError(f"model config {str(p)!r} is not valid JSON ({exc}); fix or re-download the file.") from None
    if not isinstance(cfg, dict):
        raise HarnessError(f"model config {str(p)!r} must be a JSON object, got {type(cfg).__name__}.")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM here
        cfg = {**cfg, **cfg["text_config"]}
    src = str(p)
    n_layers = _req(cfg, "num_hidden_layers", src)
    hidden = _req(cfg, "hidden_size", src)
    n_heads = _req(cfg, "num_attention_heads", src)
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or (hidden // n_heads if isinstance(hidden, int) and isinstance(n_heads, int) and n_heads else 0)
    mla = bool(cfg.get("kv_lora_rank"))
    n_experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    n_dense = 0
    if n_experts:
        if "first_k_dense_replace" in cfg:
            n_dense = int(cfg["first_k_dense_replace"])
        elif cfg.get("mlp_only_layers"):
            n_dense = len(cfg["mlp_only_layers"])
        step = cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or 1
        if isinstance(step, int) and step > 1:
            n_dense = n_layers - n_layers // step
    shared_n = cfg.get("n_shared_experts") or 0
    shared_i = cfg.get("shared_expert_intermediate_size") or 0
    if shared_i and not shared_n:
        shared_n = 1
    if shared_n and not shared_i:
        shared_i = cfg.get("moe_intermediate_size") or 0
    name = cfg.get("_name_or_path") or (p.parent.name if p.name == "config.json" else p.stem.removesuffix(".config"))
    return ModelSpec(
        name=str(name),
        n_layers=n_layers,
        hidden_size=hidden,
        n_heads=n_heads,
        n_kv_heads=n_kv if not mla else n_heads,
        head_dim=(cfg.get("qk_nope_head_dim", 0) + cfg.get("qk_rope_head_dim", 0)) if mla else head_dim,
        intermediate_size=cfg.get("intermediate_size") or 0,
        vocab_size=_req(cfg, "vocab_size", src),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention="mla" if mla else "gqa",
        kv_lora_rank=cfg.get("kv_lora_rank") or 0,
        qk_rope_head_dim=cfg.get("qk_rope_head_dim") or 0 if mla else 0,
        qk_nope_head_dim=cfg.get("qk_nope_head_dim") or 0 if mla else 0,
        v_head_dim=cfg.get("v_head_dim") or 0 if mla else 0,
        q_lora_rank=cfg.get("q_lora_rank") or 0,
        n_routed_experts=n_experts,
        n_experts_per_token=cfg.get("num_experts_per_tok") or 0,
        # Mixtral-style configs size the experts with intermediate_size
        moe_intermediate_size=(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0) if n_experts else 0,
        n_shared_experts=shared_n,
        shared_expert_intermediate_size=shared_i,
        n_dense_layers=n_dense,
        source=f"Hugging Face config.json at {src}",
    )


def with_overrides(model: ModelSpec, **kw) -> ModelSpec:
    names = {f.name for f in fields(ModelSpec)}
    bad = set(kw) - names
    if bad:
        raise HarnessError(f"model override: unknown field(s) {sorted(bad)}; known: {sorted(names)}.")
    return replace(model, **kw)
