"""The over-saturation rule: fires on a queue growing at the arrival rate minus the service rate, stays quiet on a
stable server, on a startup backlog that drains, and before its minimum time; the slope's confidence bound."""

import math

import numpy as np
import pandas as pd
import pytest

from workloads.oversaturation import OversaturationRule, fit_slope, judge, judge_run, t95


def test_t_quantiles():
    assert t95(1) == 6.314 and t95(10) == 1.812 and t95(30) == 1.697
    assert 1.66 < t95(100) < 1.67 and abs(t95(10_000) - 1.6449) < 1e-3 and math.isinf(t95(0))


def test_slope_bound_is_a_confidence_bound():
    x = np.arange(20.0)
    assert fit_slope(x, 2 * x + 1).lower_95 == pytest.approx(2.0)  # no noise: the bound is the slope
    rng = np.random.default_rng(0)
    misses = 0
    for _ in range(400):  # a true slope of 0.5 under noise: its 95 % lower bound lies above 0.5 about 5 % of the time
        s = fit_slope(x, 0.5 * x + rng.normal(0, 2, x.size))
        misses += s.lower_95 > 0.5
    assert 0.02 < misses / 400 < 0.09
    assert fit_slope([1, 2], [1, 2]) is None and fit_slope([1, 1, 1], [1, 2, 3]) is None


def _queue(lam, mu, dur, *, seed=0, startup_s=0.0, service_s=0.5):
    """Requests of a FIFO single server of rate mu fed at rate lam (deterministic arrivals; exponential noise on service)."""
    rng = np.random.default_rng(seed)
    t = np.arange(0, dur, 1 / lam)
    free = startup_s
    rows = []
    for a in t:
        start = max(a, free)
        free = start + rng.exponential(1 / mu)
        first = start + 0.05
        rows.append({"sent_ns": a * 1e9, "e2e_s": free + service_s - a, "first_token_ns": first * 1e9,
                     "ttft_from_intended_s": first - a})
    return pd.DataFrame(rows)


def test_a_server_below_capacity_is_not_cut():
    assert all(judge_run(_queue(4.0, 6.0, 60, seed=seed), rate_per_s=4.0) is None for seed in range(5))
    cut = sum(judge_run(_queue(5.0, 6.0, 90, seed=seed), rate_per_s=5.0) is not None for seed in range(20))
    assert cut == 0  # 83 % load: its queue wanders, but not for a whole window at both signals


def test_a_startup_backlog_that_drains_is_not_cut():
    # nothing served for 10 s, then the server drains the backlog at 2x the arrival rate
    assert judge_run(_queue(3.0, 6.0, 60, startup_s=10.0), rate_per_s=3.0) is None


def test_an_overloaded_server_is_cut_soon_after_the_minimum_time():
    cut = [judge_run(_queue(6.0, 5.5, 90, seed=seed), rate_per_s=6.0) for seed in range(10)]
    assert sum(v is not None for v in cut) >= 8  # 109 % load
    v = judge_run(_queue(6.0, 4.0, 90), rate_per_s=6.0)
    assert v is not None and v.oversaturated and 20.0 <= v.t_s <= 30.0
    assert v.in_flight.slope == pytest.approx(2.0, rel=0.3)  # λ − μ
    assert "in flight grew" in v.reason and "TTFT from the intended send grew" in v.reason


def test_judge_needs_points_and_time():
    assert judge(5.0, [], [], [], [], rate_per_s=1.0).reason.startswith("not judged before 20 s")
    v = judge(30.0, [29.0, 30.0], [1, 2], [29.5], [1.0], rate_per_s=1.0)
    assert not v.oversaturated and v.reason.startswith("fewer than 8 points")
    with pytest.raises(ValueError, match="min_points must be an integer >= 3"):
        OversaturationRule(min_points=2)
