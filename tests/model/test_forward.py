"""Forward-pass accounting against Chapter 9, §9.2.3 (Qwen3-8B, BF16)."""

import pytest

from harness.model.forward import (
    causal_pairs,
    decode_step_work,
    expected_active_experts,
    mean_decode_context,
    param_counts,
    prefill_work,
)
from harness.specs.models import get_model

Q8 = get_model("qwen3-8b")


def test_qwen3_8b_parameter_count_matches_published_8_19b():
    # Qwen3-8B model card: 8.2B parameters in total (6.95B non-embedding)
    pc = param_counts(Q8)
    assert pc.total == pytest.approx(8.19e9, rel=2e-3)
    assert pc.total * 2 / 2**30 == pytest.approx(15.3, abs=0.05)  # §9.7.2: "about 15.3 GiB of weights"


def test_prefill_8192_tokens_is_133_6_tflops():
    # Chapter 9, §9.2.3: 8192-token prefill needs 133.6 TFLOPs
    w = prefill_work(Q8, 8192, 0, 2.0, 2.0)
    assert w.flops / 1e12 == pytest.approx(133.6, abs=0.05)
    assert w.weight_bytes / 1e9 == pytest.approx(15.1, abs=0.05)  # "reads about 15 GB of weights once"
    # logits only for the last input token
    assert w.logits_flops == 2 * 4096 * 151936


def test_causal_attention_is_counted_exactly():
    assert causal_pairs(4) == 1 + 2 + 3 + 4
    assert causal_pairs(2, cached_tokens=3) == 4 + 5
    a = prefill_work(Q8, 2048, 6144, 2.0, 2.0)
    b = prefill_work(Q8, 8192, 0, 2.0, 2.0)
    # a cached prefix keeps its attention context but drops its projections
    assert a.attention_flops / b.attention_flops == pytest.approx(causal_pairs(2048, 6144) / causal_pairs(8192))
    assert a.linear_flops == pytest.approx(b.linear_flops / 4)


def test_decode_step_at_batch_32():
    # Chapter 9, §9.2.3: mean context 8192+512=8704; 15.1 GB weights + 41.1 GB KV; 0.65 TFLOPs
    ctx = mean_decode_context(8192, 1025)
    assert ctx == 8704
    d = decode_step_work(Q8, 32, ctx, 2.0, 2.0)
    assert d.weight_bytes / 1e9 == pytest.approx(15.1, abs=0.05)
    assert d.kv_read_bytes / 1e9 == pytest.approx(41.1, abs=0.05)
    assert d.flops / 1e12 == pytest.approx(0.65, abs=0.005)


def test_kv_of_batch_at_end_of_generation():
    # §9.2.3: at batch 32 the KV of all requests reaches 43.5 GB; with weights about 59.9 GB
    from harness.model.kv import kv_bytes

    kv = 32 * kv_bytes(Q8, 8192 + 1024, 2.0)
    assert kv / 1e9 == pytest.approx(43.5, abs=0.05)
    assert (kv + param_counts(Q8).total * 2) / 1e9 == pytest.approx(59.9, abs=0.05)


def test_expected_active_experts():
    # §9.3.3 formula E[U] = E(1-(1-K/E)^M); one token touches exactly K experts
    assert expected_active_experts(128, 8, 1) == pytest.approx(8)
    assert expected_active_experts(128, 8, 10_000) == pytest.approx(128)


def test_moe_decode_reads_only_touched_experts():
    m = get_model("qwen3-235b-a22b")
    small = decode_step_work(m, 1, 1000, 2.0, 2.0)
    big = decode_step_work(m, 256, 1000, 2.0, 2.0)
    assert small.weight_bytes < big.weight_bytes < param_counts(m).total * 2


def test_mla_decode_uses_compact_path():
    ds = get_model("deepseek-v3")
    d = decode_step_work(ds, 1, 8192, 2.0, 2.0)
    # reads the latent state, 61·576·2 bytes per token (§9.2.2)
    assert d.kv_read_bytes == pytest.approx(8192 * 61 * 576 * 2)
