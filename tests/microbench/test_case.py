"""Derived rates and efficiencies of a case; above-peak results are flagged, never kept silently."""

import math

import pytest

from harness.errors import HarnessError
from microbench.case import CaseResult, Peak, Work, derive
from microbench.timing import QUICK, measurement_from_samples


def test_derive_rates_and_efficiencies():
    d = derive(Work(useful_flops=2e12, useful_bytes=1e9), 1.0, Peak(4e12, 2e9, "test"))
    assert d.flops_per_s == 2e12 and d.bytes_per_s == 1e9
    assert d.mfu == pytest.approx(0.5) and d.mbu == pytest.approx(0.5)
    assert d.valid and not d.flags


def test_above_peak_is_flagged_invalid():
    d = derive(Work(useful_flops=5e12), 1.0, Peak(4e12, None, "spec X"))
    assert not d.valid and d.mfu == pytest.approx(1.25)
    assert "above_peak" in d.flags[0] and "spec X" in d.flags[0]


def test_padding_counts_against_peak():
    # useful work is below peak, the padded work the hardware executed is not: still an error
    d = derive(Work(useful_flops=1e12, padded_flops=5e12), 1.0, Peak(4e12, None, "p"))
    assert d.mfu == pytest.approx(0.25) and not d.valid


def test_work_validation():
    with pytest.raises(HarnessError, match="padded_flops"):
        Work(useful_flops=10.0, padded_flops=5.0)
    with pytest.raises(HarnessError, match="useful_bytes"):
        Work(useful_bytes=-1.0)


def test_row_carries_counts_and_flags():
    m = measurement_from_samples([1e-3, 1.1e-3, 0.9e-3], 1, "perf_counter_ns", QUICK)
    r = CaseResult("gemm", "x", "numpy", "cpu", "fp32", {"m": 1}, Work(useful_flops=2e9, padded_flops=3e9), m, Peak(None, None, "none"))
    row = r.to_row()
    assert row["useful_flops"] == 2e9 and row["padded_flops"] == 3e9 and row["median_s"] == pytest.approx(1e-3)
    assert math.isnan(row["mfu"]) and row["valid"]
    assert len(r.sample_rows()) == 3
