"""Ideal stage pipelines (Chapter 9, §9.3.4 Fig. 9-17, §9.4.3 Fig. 9-26)."""

import pytest

from harness.errors import HarnessError
from harness.model.pipeline import pipeline_gain, pipeline_makespan_s, serial_s, split_batch_makespan_s


def test_two_stage_af_pipeline():
    # §9.3.4: 2 ms attention, 3 ms experts, 4 micro-batches: serial 20 ms, pipelined 2+3+3·3 = 14 ms, 6 ms budget
    g = pipeline_gain([2e-3, 3e-3], 4)
    assert g.serial_s == pytest.approx(20e-3)
    assert g.pipelined_s == pytest.approx(14e-3)
    assert g.saving_s == pytest.approx(6e-3)
    assert g.period_s == 3e-3


def test_one_microbatch_gains_nothing_and_equal_stages_halve_with_many():
    assert pipeline_makespan_s([1.0, 2.0, 3.0], 1) == serial_s([1.0, 2.0, 3.0], 1)
    assert pipeline_makespan_s([1.0, 1.0], 100) == pytest.approx(101.0)


def test_split_batch_three_stages():
    # §9.4.3: 0.336/0.156/0.336 ms halved -> (0.827 + 0.336)/2 ≈ 0.581 ms
    assert split_batch_makespan_s([0.336e-3, 0.156e-3, 0.336e-3], 2) == pytest.approx(0.582e-3, abs=0.001e-3)


def test_bad_pipeline_inputs():
    with pytest.raises(HarnessError, match="microbatches must be a positive integer, got 0"):
        pipeline_makespan_s([1.0], 0)
    with pytest.raises(HarnessError, match=r"stage_s_per_microbatch\[1\] must be a finite time"):
        pipeline_gain([1.0, -2.0], 2)
    with pytest.raises(HarnessError, match="at least one stage"):
        serial_s([], 2)
