"""Open-loop schedules: seeded, at the asked rate, split without loss, bad values named."""

import numpy as np
import pytest

from harness.errors import HarnessError
from workloads.schedule import burst, constant, gamma, make_schedule, poisson, ramp, split_indices, trace


def test_constant_is_evenly_spaced():
    s = constant(4.0, 10.0)
    assert s.count == 40
    assert np.allclose(np.diff(s.intended_s), 0.25)


def test_poisson_is_seeded_and_at_rate():
    a, b = poisson(3.5, 2000.0, seed=7), poisson(3.5, 2000.0, seed=7)
    assert np.array_equal(a.intended_s, b.intended_s) and a.digest() == b.digest()
    assert poisson(3.5, 2000.0, seed=8).digest() != a.digest()
    # 7000 expected arrivals: the count is within 4 sigma (sqrt(7000) ≈ 84)
    assert abs(a.count - 7000) < 4 * 84
    gaps = np.diff(a.intended_s)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: cv 1


def test_gamma_burstiness_sets_the_cv():
    s = gamma(10.0, 2000.0, cv=2.0, seed=1)
    gaps = np.diff(s.intended_s)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.08)


def test_ramp_rate_rises_linearly():
    s = ramp(0.0, 20.0, 1000.0, seed=3)
    first, second = (s.intended_s < 500).sum(), (s.intended_s >= 500).sum()
    # expected 2500 and 7500 arrivals
    assert first == pytest.approx(2500, rel=0.08) and second == pytest.approx(7500, rel=0.05)


def test_burst_puts_the_backlog_at_zero():
    s = burst(35, 3.5, 60.0, seed=0)  # §9.6.1: λ·T_s = 3.5 × 10 = 35
    assert (s.intended_s == 0).sum() == 35
    assert s.count > 35


def test_trace_shifts_and_scales():
    s = trace([10.0, 12.0, 11.0], time_scale=0.5)
    assert list(s.intended_s) == [0.0, 0.5, 1.0]


def test_split_is_a_partition():
    parts = [split_indices(101, k, 3) for k in range(3)]
    allidx = np.sort(np.concatenate(parts))
    assert np.array_equal(allidx, np.arange(101))
    assert {len(p) for p in parts} <= {33, 34}


@pytest.mark.parametrize("kw,field", [
    ({"rate_per_s": 0, "duration_s": 10}, "rate_per_s"),
    ({"rate_per_s": 1, "duration_s": float("nan")}, "duration_s"),
    ({"rate_per_s": True, "duration_s": 10}, "rate_per_s"),
])
def test_bad_values_name_the_field(kw, field):
    with pytest.raises(HarnessError, match=field):
        make_schedule("poisson", **kw)


def test_unknown_kind_lists_the_known_ones():
    with pytest.raises(HarnessError, match="constant, poisson"):
        make_schedule("weibull", rate_per_s=1, duration_s=1)
