"""Padding, overlap and token completion (Chapter 9, §9.4.3, Fig. 9-25 to 9-27)."""

import pytest

from harness.errors import HarnessError
from harness.model.moe_overlap import overlap_gain, padded_rows, token_completion
from harness.model.pipeline import split_batch_makespan_s


def test_grouped_gemm_padding():
    # §9.4.3 / exercise 9-6: [32,16,8,4,2,1,1,0]: 64 useful rows, 224 padding the non-empty to 32, 256 padding all
    p = padded_rows([32, 16, 8, 4, 2, 1, 1, 0], 32)
    assert (p.useful_rows, p.padded_nonempty_rows, p.padded_all_rows) == (64, 224, 256)
    assert (p.nonempty_over_useful, p.all_over_useful) == (3.5, 4.0)


def test_two_microbatch_overlap_of_the_uniform_row():
    # §9.4.3: 0.336 / 0.156 / 0.336 ms serial 0.827 -> 0.581 ms with two micro-batches, 0.246 ms saved;
    # communication ≈49 % slower or compute ≈3.1× slower cancels the gain
    d = 64 * 2**20 / 200e9  # uniform cross-server dispatch bound (example 9.5)
    c = 2048 * 6 * 4096 * 1536 / 494.7e12
    g = overlap_gain(d, c, d, 2)
    assert g.serial_s == pytest.approx(0.827e-3, abs=0.0005e-3)
    assert g.pipelined_s == pytest.approx(0.581e-3, abs=0.0005e-3)
    assert g.saving_s == pytest.approx(0.246e-3, abs=0.0005e-3)
    assert g.communication_slowdown_to_cancel - 1 == pytest.approx(0.49, abs=0.005)
    assert g.compute_slowdown_to_cancel == pytest.approx(3.1, abs=0.05)
    f = g.communication_slowdown_to_cancel
    assert split_batch_makespan_s([f * d, c, f * d], 2) == pytest.approx(g.serial_s, rel=1e-9)


def test_no_gain_to_cancel_with_one_microbatch():
    g = overlap_gain(1.0, 1.0, 1.0, 1)
    assert g.saving_s == 0 and g.communication_slowdown_to_cancel == 1.0


def test_token_completion_waits_for_the_slowest_branch():
    # Fig. 9-27: branches of 0.5 and 1.4 ms merge at 1.4 ms; 0.3 ms for the fast one changes nothing
    t = token_completion([[0.5e-3, 1.4e-3], [0.3e-3, 1.4e-3], [0.2e-3]], merge_s=[0.0, 0.0, 0.1e-3])
    assert t.completion_s[:2] == (1.4e-3, 1.4e-3)
    assert t.idle_after_fastest_s[0] == pytest.approx(0.9e-3)
    assert t.completion_s[2] == pytest.approx(0.3e-3)
    assert t.batch_barrier_s == 1.4e-3


def test_bad_inputs():
    with pytest.raises(HarnessError, match=r"rows_per_expert\[1\] must be an integer >= 0, got -1"):
        padded_rows([1, -1], 32)
    with pytest.raises(HarnessError, match="tile_rows must be a positive integer"):
        padded_rows([1], 0)
    with pytest.raises(HarnessError, match="every token needs at least one"):
        token_completion([[1.0], []])
    with pytest.raises(HarnessError, match="finite time in seconds >= 0"):
        token_completion([[-1.0]])
    with pytest.raises(HarnessError, match=r"one per token \(2\)"):
        token_completion([[1.0], [2.0]], merge_s=[0.0, 0.0, 0.0])
    with pytest.raises(HarnessError, match="compute_s must be a finite number >= 0"):
        overlap_gain(1.0, -1.0, 1.0)
