"""harness.engines.random_gguf: real shapes, quantized blocks written directly, a file llama.cpp loads and serves."""

from __future__ import annotations

import numpy as np
import pytest

from harness.engines.llama_cpp import binary_available
from harness.engines.random_gguf import SHAPES, SILENT_TOKEN_IDS, Shape, _block_bytes, vocabulary, write_random_gguf
from harness.errors import HarnessError
from harness.specs.gguf_model import read_gguf


def test_shapes_have_the_public_parameter_counts():
    # Llama-3.1-8B: 8.03 B parameters (model card); Qwen3-8B: 8.19 B (model card: 8.2 B)
    assert SHAPES["llama-3.1-8b"].params == pytest.approx(8.03e9, rel=0.002)
    assert SHAPES["qwen3-8b"].params == pytest.approx(8.19e9, rel=0.002)


@pytest.mark.parametrize("qtype, block_bytes, std_q", [("Q4_0", 18, None), ("Q8_0", 34, None)])
def test_blocks_have_the_type_size_and_a_trained_like_spread(qtype, block_bytes, std_q):
    rng = np.random.default_rng(0)
    b = _block_bytes(rng, qtype, 64, 256)
    assert b.shape == (64, 256 // 32 * block_bytes) and b.dtype == np.uint8
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    w = dequantize(b, GGMLQuantizationType[qtype])
    assert w.shape == (64, 256) and np.isfinite(w).all()
    assert 0.01 < float(w.std()) < 0.03  # WEIGHT_STD 0.02: activations stay finite through 32 layers


def test_f16_is_plain_halves():
    b = _block_bytes(np.random.default_rng(0), "F16", 8, 64)
    assert b.dtype == np.float16 and b.shape == (8, 64) and 0.01 < float(b.astype(np.float32).std()) < 0.03


def test_vocabulary_is_padded_with_filler_pieces_that_no_prompt_word_uses():
    base, _, _ = vocabulary(0)
    toks, scores, types = vocabulary(len(base) + 100)
    assert len(toks) == len(scores) == len(types) == len(base) + 100 and len(set(toks)) == len(toks)
    assert all(t.startswith("\u2581x") for t in toks[len(base):])
    with pytest.raises(HarnessError, match="below"):
        vocabulary(10)


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0", "F16"])
def test_tiny_file_reads_back_with_its_shape_and_type(tmp_path, qtype):
    p = write_random_gguf(tmp_path / "m.gguf", shape="tiny", qtype=qtype)
    gm = read_gguf(p)
    sh = SHAPES["tiny"]
    assert (gm.spec.n_layers, gm.spec.hidden_size, gm.spec.n_heads, gm.spec.n_kv_heads, gm.spec.intermediate_size) == \
        (sh.layers, sh.hidden, sh.heads, sh.kv_heads, sh.ffn)
    assert gm.file_type == f"MOSTLY_{qtype}"
    from gguf import GGUFReader
    from gguf.quants import dequantize

    t = {x.name: x for x in GGUFReader(str(p)).tensors}
    assert t["blk.0.ffn_up.weight"].tensor_type.name == qtype
    out = t["output.weight"]
    w = dequantize(np.asarray(out.data), out.tensor_type) if qtype != "F16" else np.asarray(out.data)
    assert not w[list(SILENT_TOKEN_IDS)].any() and w[300:].any()  # silent rows zero, the rest random


def test_qwen3_shape_writes_the_per_head_norms(tmp_path):
    sh = Shape("q", "qwen3", 2, 128, 2, 1, 64, 256, 0, 4096, 1e6, False)
    from gguf import GGUFReader

    names = {x.name for x in GGUFReader(str(write_random_gguf(tmp_path / "q.gguf", shape=sh, qtype="Q8_0"))).tensors}
    assert {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight"} <= names


def test_bad_inputs_name_the_choices(tmp_path):
    with pytest.raises(HarnessError, match="unknown model shape 'gpt5'.*llama-3.1-8b"):
        write_random_gguf(tmp_path / "x.gguf", shape="gpt5")
    with pytest.raises(HarnessError, match="Q4_K.*Q4_0"):
        write_random_gguf(tmp_path / "x.gguf", shape="tiny", qtype="Q4_K")


@pytest.mark.skipif(binary_available() is not None, reason=binary_available() or "")
def test_llama_server_loads_the_tiny_model_and_serves_a_request(tmp_path):
    from harness.engines import http
    from harness.engines.config import parse_engine_config
    from harness.engines.launcher import RunningEngine, free_port
    from harness.engines.session import make_plan

    p = write_random_gguf(tmp_path / "tiny.gguf", shape="tiny", qtype="Q4_0")
    cfg = parse_engine_config({"schema_version": 1, "name": "random-tiny", "engine": "llama.cpp",
                               "model": {"path": str(p), "served_name": "tiny"},
                               "llama_cpp": {"threads": 1, "ctx_size": 512, "parallel": 1, "repack": False},
                               "startup": {"timeout_s": 60}})
    plan = make_plan(cfg, port=free_port())
    with RunningEngine(plan, log_dir=tmp_path / "logs"):
        r = http.post_json(plan.endpoint + "/v1/completions",
                           {"model": "tiny", "prompt": "the of and to in", "max_tokens": 8, "ignore_eos": True}, timeout_s=60)
    assert r.status == 200
    body = r.json()
    assert body["usage"]["completion_tokens"] == 8 and body["usage"]["prompt_tokens"] == 6  # BOS + one token a word
    assert body["choices"][0]["text"]  # every emitted token renders text
