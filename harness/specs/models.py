"""Model architecture specs: the catalog and a reader for Hugging Face ``config.json`` files.

The record itself, ModelSpec, lives in harness.specs.model_spec (the GGUF reader builds it too) and is re-exported here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields, replace
from pathlib import Path

from harness.errors import HarnessError
from harness.specs._validate import unknown
from harness.specs.gguf_model import model_spec_from_gguf
from harness.specs.model_spec import ModelSpec


_AIC = "as bundled in aiconfigurator-core 0.12.0 model_configs/"

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec(
            name="qwen3-8b", n_layers=36, hidden_size=4096, n_heads=32, n_kv_heads=8, head_dim=128,
            intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
            source="Qwen/Qwen3-8B config.json; Chapter 9 §9.2.2 (36 layers, 8 KV heads, head dim 128)",
        ),
        ModelSpec(
            name="qwen3-32b", n_layers=64, hidden_size=5120, n_heads=64, n_kv_heads=8, head_dim=128,
            intermediate_size=25600, vocab_size=151936, tie_word_embeddings=False,
            source=f"Qwen/Qwen3-32B config.json (64 layers, hidden 5120, 64 heads, 8 KV heads, head dim 128, FFN 25600; {_AIC})",
        ),
        ModelSpec(
            name="qwen3-235b-a22b", n_layers=94, hidden_size=4096, n_heads=64, n_kv_heads=4, head_dim=128,
            intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
            n_routed_experts=128, n_experts_per_token=8, moe_intermediate_size=1536,
            source="Qwen/Qwen3-235B-A22B config.json (128 experts, top-8, expert FFN 1536); Chapter 9 §9.3",
        ),
        ModelSpec(
            name="llama-3.1-8b", n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8, head_dim=128,
            intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False,
            source=f"meta-llama/Llama-3.1-8B config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, FFN 14336, "
                   f"vocab 128256; {_AIC})",
        ),
        ModelSpec(
            name="llama-3.1-70b", n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8, head_dim=128,
            intermediate_size=28672, vocab_size=128256, tie_word_embeddings=False,
            source=f"meta-llama/Llama-3.1-70B config.json (80 layers, hidden 8192, 64 heads, 8 KV heads, FFN 28672, "
                   f"vocab 128256; {_AIC})",
        ),
        ModelSpec(
            name="gpt-oss-120b", n_layers=36, hidden_size=2880, n_heads=64, n_kv_heads=8, head_dim=64,
            intermediate_size=2880, vocab_size=201088, tie_word_embeddings=False,
            n_routed_experts=128, n_experts_per_token=4, moe_intermediate_size=2880,
            sliding_window=128, n_sliding_layers=18,
            source=f"openai/gpt-oss-120b config.json (36 layers alternating sliding-window 128 / full attention, hidden "
                   f"2880, 64 heads, 8 KV heads, head dim 64, 128 experts top-4 of width 2880, vocab 201088; experts "
                   f"shipped in MXFP4, attention and router in BF16; {_AIC})",
        ),
        ModelSpec(
            name="deepseek-v3", n_layers=61, hidden_size=7168, n_heads=128, n_kv_heads=128, head_dim=192,
            intermediate_size=18432, vocab_size=129280, attention="mla", tie_word_embeddings=False,
            kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536,
            n_routed_experts=256, n_experts_per_token=8, moe_intermediate_size=2048, n_shared_experts=1,
            shared_expert_intermediate_size=2048, n_dense_layers=3,
            source="deepseek-ai/DeepSeek-V3 config.json; Chapter 9 §9.2.2 (61 layers, d_c=512, d_r=64)",
        ),
        ModelSpec(
            name="deepseek-r1", n_layers=61, hidden_size=7168, n_heads=128, n_kv_heads=128, head_dim=192,
            intermediate_size=18432, vocab_size=129280, attention="mla", tie_word_embeddings=False,
            kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536,
            n_routed_experts=256, n_experts_per_token=8, moe_intermediate_size=2048, n_shared_experts=1,
            shared_expert_intermediate_size=2048, n_dense_layers=3,
            source=f"deepseek-ai/DeepSeek-R1 config.json (the DeepSeek-V3 architecture: 61 layers, MLA d_c=512 d_r=64, 256 "
                   f"experts top-8 + 1 shared, 3 dense layers; weights shipped in FP8 blocks of 128x128; {_AIC})",
        ),
    ]
}


def tensor_parallel_problem(m: ModelSpec, tp: int, field: str = "tp") -> str | None:
    """Why `tp` cards cannot split `m` the way the engines split it (attention heads evenly, GQA KV heads split or
    replicated whole), naming the field and the sizes that work; None when they can."""
    def splits(t: int) -> bool:
        return m.n_heads % t == 0 and (m.attention == "mla" or m.n_kv_heads % t == 0 or t % m.n_kv_heads == 0)

    if splits(tp):
        return None
    ok = [t for t in range(1, min(m.n_heads, 64) + 1) if splits(t)]
    if m.n_heads % tp:
        return (f"{field} = {tp} does not divide the {m.n_heads} attention heads of {m.name}; give a tensor-parallel "
                f"size from {ok[:12]}")
    return (f"{field} = {tp} and the {m.n_kv_heads} KV heads of {m.name}: one must divide the other (KV heads are split "
            f"or replicated whole); give a tensor-parallel size from {ok[:12]}")


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
    window, n_sliding = _sliding_layers(cfg)
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
        sliding_window=window,
        n_sliding_layers=n_sliding,
        source=f"Hugging Face config.json at {src}",
    )


def _sliding_layers(cfg: dict) -> tuple[int, int]:
    """(window, windowed layers) from `layer_types` (gpt-oss: "sliding_attention" / "full_attention"); a config that
    names a window without saying which layers use it (Qwen3's `sliding_window` with use_sliding_window false) has none."""
    types = cfg.get("layer_types")
    window = cfg.get("sliding_window") or 0
    if not isinstance(types, list) or not isinstance(window, int) or window <= 0:
        return 0, 0
    n = sum(1 for t in types if t == "sliding_attention")
    return (window, n) if n else (0, 0)


def with_overrides(model: ModelSpec, **kw) -> ModelSpec:
    names = {f.name for f in fields(ModelSpec)}
    bad = set(kw) - names
    if bad:
        raise HarnessError(f"model override: unknown field(s) {sorted(bad)}; known: {sorted(names)}.")
    return replace(model, **kw)
