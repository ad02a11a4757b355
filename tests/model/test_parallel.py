"""Tensor-parallel layout: KV copies, the ring all-reduce, and the layouts the engines refuse (Chapter 9, §9.1.1)."""

import pytest

from harness.errors import HarnessError
from harness.model.parallel import Parallel, allreduce_time_s, check_parallel, kv_replication
from harness.specs.models import get_model


def test_kv_copies_gqa_split_then_replicated_and_mla_everywhere():
    m = get_model("llama-3.1-70b")  # 8 KV heads
    assert kv_replication(m, 1) == 1 and kv_replication(m, 8) == 1  # one head per card
    assert kv_replication(get_model("qwen3-235b-a22b"), 8) == 2  # 4 KV heads on 8 cards: each head kept twice
    assert kv_replication(get_model("deepseek-v3"), 8) == 8  # MLA's latent has no head axis: every card keeps it


def test_ring_allreduce_is_2_p_minus_1_steps():
    # 1 MB over 8 cards at 100 GB/s with 5 µs per step: 14 α + (14/8)·S/B
    assert allreduce_time_s(1e6, 8, 100e9, 5e-6) == pytest.approx(14 * 5e-6 + 1.75 * 1e-5)
    assert allreduce_time_s(1e6, 1, 100e9, 5e-6) == 0.0


def test_layouts_the_engines_refuse_name_the_field_and_the_fix():
    with pytest.raises(HarnessError, match=r"tp = 3 does not divide the 64 attention heads of llama-3.1-70b; give a "
                                           r"tensor-parallel size from \[1, 2, 4, 8"):
        check_parallel(get_model("llama-3.1-70b"), Parallel(tp=3))
    with pytest.raises(HarnessError, match="ep = 2, but llama-3.1-8b is a dense model"):
        check_parallel(get_model("llama-3.1-8b"), Parallel(tp=2, ep=2))
    with pytest.raises(HarnessError, match="moe_tp × ep"):
        Parallel(tp=4, moe_tp=4, ep=2)
    check_parallel(get_model("qwen3-235b-a22b"), Parallel(tp=8))  # 4 KV heads, 8 cards: replicated whole, allowed
