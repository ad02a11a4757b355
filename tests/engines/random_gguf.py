"""A random-weight GGUF that llama.cpp loads and runs (llama architecture, SentencePiece vocabulary, Q8_0 weights).

A second model of another shape and quant type than the shipped Gemma 3 270M (Q4_K_M): llama.cpp runs
random weights at the same speed as trained ones, so the loop's timing figures are meaningful. The
vocabulary holds the byte-fallback tokens, the letters, and every prefix of each synthetic prompt word
(workloads.prompts), so the load generator's prompts tokenize one token per word.

Every token the model can emit renders text, as a text model's do: the output rows of the control tokens and of
the byte tokens 0x80-0xFF (alone, an incomplete UTF-8 character) are zero, so greedy decoding never picks them
(their logit 0 is below the best of hundreds of random logits). With them, llama-server held back the empty-text
tokens and streamed 20 content events for 64 tokens, which made the client's TTFT and step figures describe the
model's text rather than the engine (2026-12-01).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


# <unk>, <s>, </s> and the bytes 0x80-0xFF (ids 3 + byte): tokens whose text alone is empty
SILENT_TOKEN_IDS = (0, 1, 2, *range(3 + 0x80, 3 + 0x100))


def write_random_gguf(path: str | Path, *, n_layers: int = 4, hidden: int = 256, heads: int = 4, kv_heads: int = 2,
                      ffn: int = 768, context: int = 4096, seed: int = 0) -> Path:
    import gguf
    from gguf.quants import quantize

    from workloads.prompts import WORDS

    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    # llama.cpp's SentencePiece tokenizer builds a word by merging symbol pairs that are in the vocabulary, so every
    # prefix of "▁word" is a piece too (longer pieces score higher and merge first): one token per prompt word
    pieces = {"\u2581"} | {c for w in WORDS for c in w}
    for w in WORDS:
        pieces |= {"\u2581" + w[:k] for k in range(1, len(w) + 1)}
    words = sorted(pieces, key=lambda p: (len(p), p))
    tokens += words
    types += [1] * len(words)
    scores = [0.0] * 259 + [float(len(p)) for p in words]
    vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("random-llama-q8")
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn)
    w.add_rope_dimension_count(head_dim)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def q8(name: str, rows: int, cols: int, zero_rows: tuple[int, ...] = ()) -> None:
        a = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        a[list(zero_rows)] = 0.0
        w.add_tensor(name, quantize(a, Q.Q8_0), raw_dtype=Q.Q8_0)

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(hidden, dtype=np.float32))

    q8("token_embd.weight", vocab, hidden)
    norm("output_norm.weight")
    q8("output.weight", vocab, hidden, zero_rows=SILENT_TOKEN_IDS)
    for i in range(n_layers):
        norm(f"blk.{i}.attn_norm.weight")
        q8(f"blk.{i}.attn_q.weight", heads * head_dim, hidden)
        q8(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        q8(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        q8(f"blk.{i}.attn_output.weight", hidden, heads * head_dim)
        norm(f"blk.{i}.ffn_norm.weight")
        q8(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        q8(f"blk.{i}.ffn_up.weight", ffn, hidden)
        q8(f"blk.{i}.ffn_down.weight", hidden, ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
