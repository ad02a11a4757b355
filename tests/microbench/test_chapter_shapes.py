"""Shapes and counts the suites take from Chapter 9, pinned to the chapter's numbers."""

import pytest

from harness.specs.models import get_model
from microbench.gemm import gemm_work, projections
from microbench.moe import CHAPTER_COUNTS, distribution, expert_params, padded_rows, padded_rows_to_max
from microbench.transfer import PAGE_SEGMENTS, SEGMENT_BYTES, sizes_two_per_octave


def test_padding_example_9_4_3():
    # Chapter 9, §9.4.3: [32,16,8,4,2,1,1,0] = 64 useful rows; 224 padded to a 32-row tile (3.5×), 256 to the max (4×)
    assert sum(CHAPTER_COUNTS) == 64
    assert padded_rows(CHAPTER_COUNTS, 32) == 224
    assert padded_rows_to_max(CHAPTER_COUNTS) == 256
    assert padded_rows(CHAPTER_COUNTS, 32) / 64 == 3.5


def test_qwen3_235b_expert_9_3_2():
    # Chapter 9, §9.3.2: P_e = 3×4096×1536 = 18 874 368 parameters, 36 MiB in BF16;
    # fig. 9-15: 8 experts × 128 tokens = 38.7 GFLOPs
    m = get_model("qwen3-235b-a22b")
    pe = expert_params(m.hidden_size, m.moe_intermediate_size)
    assert pe == 18_874_368
    assert pe * 2 == 36 * 2**20
    assert 8 * 2 * 128 * pe / 1e9 == pytest.approx(38.7, abs=0.05)


def test_distributions_sum_to_total():
    for kind in ("balanced", "power-law", "hot"):
        c = distribution(kind, 8, 64)
        assert sum(c) == 64 and len(c) == 8
    assert distribution("balanced", 8, 64) == [8] * 8
    assert distribution("hot", 8, 64)[0] == 32


def test_qwen3_8b_projections():
    p = projections(get_model("qwen3-8b"))
    assert p["qkv"] == (4096, 6144) and p["o"] == (4096, 4096) and p["gate_up"] == (4096, 24576) and p["down"] == (12288, 4096)
    w = gemm_work(8192, 8192, 8192, 2)
    assert w.useful_flops == 2 * 8192**3 and w.useful_bytes == 3 * 8192**2 * 2


def test_page_case_and_sizes():
    # Chapter 9, §9.5: a 16-token Qwen3-8B page is 72 segments of 32 KiB = one 2.25 MiB object
    assert PAGE_SEGMENTS * SEGMENT_BYTES == 2.25 * 2**20
    s = sizes_two_per_octave(4096, 2**30)
    assert s[0] == 4096 and s[-1] == 2**30
    assert len(s) == 2 * 18 + 1  # 18 octaves from 4 KiB to 1 GiB, two points each
