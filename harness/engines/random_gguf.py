"""A random-weight GGUF of a real model's shape, written fast: llama.cpp runs it at the trained model's speed.

Kernel time does not depend on the weight values, so a model of Llama-3.1-8B's or Qwen3-8B's shape with random
weights measures what the trained one would. The quantized blocks are written directly (no llama-quantize, no float
copy of the model): one random draw per tensor shape, its bytes reused by every layer; Q4_0 blocks are an fp16 scale
and 16 bytes of random nibbles, Q8_0 an fp16 scale and 32 random int8, F16 plain halves. Scales are set so the
weights have a standard deviation of about 0.02, as trained ones do, so activations stay finite.

Vocabulary: a SentencePiece ("llama") vocabulary holding the byte-fallback tokens, the letters and every prefix of each
synthetic prompt word (workloads.prompts), so the load generator's prompts tokenize one token per word, padded with
plain filler pieces to the shape's vocabulary size. The output rows of the control tokens and of the bytes 0x80-0xFF
are zero, so greedy decoding emits only tokens that render text (as tests/engines/random_gguf.py explains).

    python -m harness.engines.random_gguf OUT.gguf --shape llama-3.1-8b --type Q4_0
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from harness.errors import HarnessError
from workloads.prompts import WORDS

# <unk>, <s>, </s> and the bytes 0x80-0xFF (ids 3 + byte): tokens whose text alone is empty
SILENT_TOKEN_IDS = (0, 1, 2, *range(3 + 0x80, 3 + 0x100))
WEIGHT_STD = 0.02


@dataclass(frozen=True)
class Shape:
    """A decoder's shape as its GGUF states it (public config.json facts of the model it copies)."""

    name: str
    arch: str  # GGUF general.architecture: "llama" or "qwen3" (Qwen3 adds per-head q/k RMSNorm)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int  # padded to this with filler pieces; 0 = the base vocabulary only
    context: int
    rope_base: float
    tied: bool  # the LM head is the token embedding

    @property
    def params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = h * q + 2 * h * kv + q * h + 3 * h * self.ffn
        return self.layers * per_layer + self.vocab * h * (1 if self.tied else 2)


# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json) and Qwen3-8B (Qwen/Qwen3-8B config.json)
SHAPES = {
    "llama-3.1-8b": Shape("llama-3.1-8b", "llama", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0, False),
    "qwen3-8b": Shape("qwen3-8b", "qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1000000.0, False),
    "tiny": Shape("tiny", "llama", 4, 256, 4, 2, 64, 768, 0, 4096, 10000.0, False),
}
TYPES = ("Q4_0", "Q8_0", "F16")


def vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types): control and byte tokens, every prefix of each prompt word, then filler pieces up to
    `size` (0: none)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    pieces = {"\u2581"} | {c for w in WORDS for c in w}
    for w in WORDS:
        pieces |= {"\u2581" + w[:k] for k in range(1, len(w) + 1)}
    words = sorted(pieces, key=lambda p: (len(p), p))
    tokens += words
    types += [1] * len(words)
    scores = [0.0] * 259 + [float(len(p)) for p in words]
    if size:
        if size < len(tokens):
            raise HarnessError(f"vocabulary size {size} is below the {len(tokens)} tokens the prompts need.")
        n = size - len(tokens)
        tokens += [f"\u2581x{i}" for i in range(n)]  # digits never occur in the prompt words: never a prompt piece
        types += [1] * n
        scores += [0.0] * n
    return tokens, scores, types


def _block_bytes(rng: np.random.Generator, qtype: str, rows: int, cols: int) -> np.ndarray:
    """One tensor's raw GGUF bytes, (rows, cols) weights of standard deviation ~WEIGHT_STD."""
    if qtype == "F16":
        return (rng.standard_normal((rows, cols), dtype=np.float32) * WEIGHT_STD).astype(np.float16)
    if cols % 32:
        raise HarnessError(f"{qtype} needs rows of a multiple of 32 values; this shape has {cols}.")
    nb = rows * cols // 32
    if qtype == "Q4_0":  # d (fp16) + 16 bytes of nibbles q in 0..15, w = d·(q − 8): std(q − 8) ≈ 4.6
        d, qb, std_q = 2, 16, 4.6
    else:  # Q8_0: d (fp16) + 32 int8 in −127..127 (uniform: std ≈ 73)
        d, qb, std_q = 2, 32, 73.0
    blk = np.empty((nb, d + qb), dtype=np.uint8)
    scale = (WEIGHT_STD / std_q) * rng.uniform(0.5, 1.5, nb).astype(np.float32)
    blk[:, :2] = scale.astype(np.float16).view(np.uint8).reshape(nb, 2)
    blk[:, 2:] = np.frombuffer(rng.bytes(nb * qb), dtype=np.uint8).reshape(nb, qb)  # any byte: nibbles or int8
    return blk.reshape(rows, -1)


def write_random_gguf(path: str | Path, *, shape: str | Shape = "llama-3.1-8b", qtype: str = "Q4_0", seed: int = 0) -> Path:
    """Write a random-weight GGUF of `shape` with every matrix in `qtype` (norms F32); returns the path."""
    sh = SHAPES.get(shape) if isinstance(shape, str) else shape
    if sh is None:
        raise HarnessError(f"unknown model shape {shape!r}; known: {', '.join(SHAPES)}.")
    if qtype not in TYPES:
        raise HarnessError(f"--type {qtype!r} is not written directly; give one of {', '.join(TYPES)}.")
    Q = gguf.GGMLQuantizationType
    gq = {"Q4_0": Q.Q4_0, "Q8_0": Q.Q8_0, "F16": Q.F16}[qtype]
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary(sh.vocab)
    vocab = len(tokens)
    q_dim, kv_dim = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim

    w = gguf.GGUFWriter(str(path), sh.arch)
    w.add_name(f"random-{sh.name}-{qtype.lower()}")
    w.add_context_length(sh.context)
    w.add_embedding_length(sh.hidden)
    w.add_block_count(sh.layers)
    w.add_feed_forward_length(sh.ffn)
    w.add_rope_dimension_count(sh.head_dim)
    w.add_rope_freq_base(sh.rope_base)
    w.add_head_count(sh.heads)
    w.add_head_count_kv(sh.kv_heads)
    w.add_key_length(sh.head_dim)
    w.add_value_length(sh.head_dim)
    w.add_layer_norm_rms_eps(1e-6 if sh.arch == "qwen3" else 1e-5)
    w.add_file_type({"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "F16": gguf.LlamaFileType.MOSTLY_F16}[qtype])
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

    drawn: dict[tuple[int, int], np.ndarray] = {}

    def mat(name: str, rows: int, cols: int) -> None:
        # one draw per shape, shared by every layer (the writer writes the same buffer again)
        if (rows, cols) not in drawn:
            drawn[(rows, cols)] = _block_bytes(rng, qtype, rows, cols)
        add(name, drawn[(rows, cols)])

    def add(name: str, raw: np.ndarray) -> None:
        # quantized: the bytes' (rows, bytes per row) shape, which the writer converts to elements; F16: plain halves
        w.add_tensor(name, raw, raw_dtype=None if qtype == "F16" else gq)

    ones_h = np.ones(sh.hidden, dtype=np.float32)
    ones_d = np.ones(sh.head_dim, dtype=np.float32)
    embd = _block_bytes(rng, qtype, vocab, sh.hidden)
    add("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", ones_h)
    if not sh.tied:
        out = embd.copy()  # the LM head: the embedding's draw (values do not matter), its silent rows zeroed
        out[list(SILENT_TOKEN_IDS)] = 0  # a zero scale (fp16 0x0000) and zero quants: the row is zero in every type
        add("output.weight", out)
    for i in range(sh.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones_h)
        mat(f"blk.{i}.attn_q.weight", q_dim, sh.hidden)
        mat(f"blk.{i}.attn_k.weight", kv_dim, sh.hidden)
        mat(f"blk.{i}.attn_v.weight", kv_dim, sh.hidden)
        mat(f"blk.{i}.attn_output.weight", sh.hidden, q_dim)
        if sh.arch == "qwen3":
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", ones_d)
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", ones_d)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones_h)
        mat(f"blk.{i}.ffn_gate.weight", sh.ffn, sh.hidden)
        mat(f"blk.{i}.ffn_up.weight", sh.ffn, sh.hidden)
        mat(f"blk.{i}.ffn_down.weight", sh.hidden, sh.ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.engines.random_gguf", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the .gguf file to write")
    p.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    p.add_argument("--type", dest="qtype", default="Q4_0", choices=TYPES)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        t0 = time.perf_counter()
        path = write_random_gguf(a.out, shape=a.shape, qtype=a.qtype, seed=a.seed)
        wall = time.perf_counter() - t0
    except HarnessError as exc:
        print(f"error: {exc}")
        return 1
    size = path.stat().st_size
    print(f"{path}: {SHAPES[a.shape].params / 1e9:.2f} B parameters, {a.qtype}, {size / 2**30:.2f} GiB in {wall:.1f} s "
          f"({size / wall / 1e9:.2f} GB/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
