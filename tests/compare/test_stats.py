"""stats: the bootstrap interval covers known shifts, the rank test matches exact enumeration, verdicts."""

import itertools
import math

import numpy as np
import pytest

from harness.compare.stats import (MetricSpec, average_ranks, bootstrap_delta, bootstrap_deltas, mann_whitney, median_interval,
                                   verdict)
from harness.errors import HarnessError


def test_known_shift_detected_and_interval_covers_it():
    rng = np.random.default_rng(1)
    a = np.exp(rng.normal(np.log(0.2), 0.25, 2000))
    b = np.exp(rng.normal(np.log(0.2 * 1.10), 0.25, 2000))  # true median +10 %
    est = bootstrap_delta(a, b, MetricSpec("p50"), n_boot=1000, seed=0)
    assert est.ci_low_rel < 0.10 < est.ci_high_rel  # covers the truth
    assert est.ci_low_rel > 0  # and excludes 0
    assert verdict(est, "lower") == "slower"
    assert verdict(est, "higher") == "faster"


def test_same_distribution_false_positive_rate_near_nominal():
    # 200 comparisons of two samples of one distribution: about 5 % flagged at 95 %, never far more.
    flagged = 0
    for k in range(200):
        rng = np.random.default_rng(1000 + k)
        a, b = rng.exponential(1.0, 300), rng.exponential(1.0, 300)
        est = bootstrap_delta(a, b, MetricSpec("p50"), n_boot=300, seed=k)
        flagged += verdict(est, "lower") != "no significant change"
    assert flagged / 200 < 0.12


def test_seed_repeats_exactly_and_shared_resamples_agree():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 500), rng.normal(10.5, 1, 500)
    e1 = bootstrap_delta(a, b, MetricSpec("mean"), seed=7)
    e2 = bootstrap_delta(a, b, MetricSpec("mean"), seed=7)
    assert e1 == e2
    p50, p99 = bootstrap_deltas(a, b, [MetricSpec("p50"), MetricSpec("p99")], seed=7)
    assert p50.a_value == pytest.approx(np.percentile(a, 50)) and p99.b_value == pytest.approx(np.percentile(b, 99))


def test_reciprocal_and_scale():
    a = np.full(50, 2.0)
    b = np.full(50, 4.0)
    est = bootstrap_delta(a, b, MetricSpec("median", 8.0, reciprocal=True))  # rate = 8 / median
    assert est.a_value == 4.0 and est.b_value == 2.0 and est.delta_rel == pytest.approx(-0.5)
    assert est.ci_low_rel == pytest.approx(-0.5) and est.ci_high_rel == pytest.approx(-0.5)
    s = bootstrap_delta(np.ones(10), np.ones(12), MetricSpec("sum", 0.5))
    assert (s.a_value, s.b_value) == (5.0, 6.0) and s.delta_rel == pytest.approx(0.2)


def test_empty_side_is_not_enough_data():
    est = bootstrap_delta([], [1.0, 2.0], MetricSpec("p50"))
    assert math.isnan(est.delta_rel) and verdict(est, "lower") == "not enough data"


def test_min_effect_suppresses_tiny_significant_change():
    a = np.linspace(1.0, 1.001, 5000)
    b = a * 1.005
    est = bootstrap_delta(a, b, MetricSpec("p50"), n_boot=200)
    assert est.ci_low_rel > 0
    assert verdict(est, "lower", min_effect=0.0) == "slower"
    assert verdict(est, "lower", min_effect=0.02) == "no significant change"


def test_bad_options_name_the_flag():
    with pytest.raises(HarnessError, match="--bootstrap"):
        bootstrap_delta([1.0], [1.0], MetricSpec("p50"), n_boot=10)
    with pytest.raises(HarnessError, match="--confidence"):
        bootstrap_delta([1.0], [1.0], MetricSpec("p50"), confidence=1.5)
    with pytest.raises(HarnessError, match="statistic 'p42'"):
        MetricSpec("p42")


def test_average_ranks_with_ties():
    r, ties = average_ranks(np.array([3.0, 1.0, 3.0, 2.0]))
    assert r.tolist() == [3.5, 1.0, 3.5, 2.0]
    assert ties == 6.0  # one group of 2: 2³ − 2


def _exact_two_sided_p(a, b):
    """Exact permutation p-value of U (the definition the normal approximation stands in for)."""
    pooled = np.concatenate([a, b])
    na = len(a)
    u_obs = mann_whitney(a, b).u_a
    mu = na * len(b) / 2
    us = []
    for idx in itertools.combinations(range(len(pooled)), na):
        rest = [i for i in range(len(pooled)) if i not in idx]
        us.append(mann_whitney(pooled[list(idx)], pooled[rest]).u_a)
    us = np.array(us)
    return float(np.mean(np.abs(us - mu) >= abs(u_obs - mu) - 1e-12))


def test_mann_whitney_u_and_p_against_exact_enumeration():
    a = np.array([1.1, 2.3, 2.9, 3.4, 4.8, 5.0, 5.5])
    b = np.array([3.9, 5.2, 6.1, 6.3, 7.0, 7.7, 8.1])
    t = mann_whitney(a, b)
    # U_A counts pairs with a > b: 5.0>3.9, 5.5>3.9, 5.5>5.2, 4.8>3.9 -> 4
    assert t.u_a == 4.0 and t.u_b == 45.0 and t.u_a + t.u_b == 49
    assert t.prob_b_greater == pytest.approx(45 / 49)
    exact = _exact_two_sided_p(a, b)
    assert exact == pytest.approx(24 / 3432)  # 24 of the C(14, 7) = 3432 splits are at least as extreme
    # published critical values for n1 = n2 = 7 (two-sided): U <= 8 at 0.05, U <= 4 at 0.01
    assert exact <= 0.01
    z = (abs(4 - 24.5) - 0.5) / math.sqrt(49 / 12 * 15)  # the normal approximation written out
    assert t.z == pytest.approx(z) and t.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert t.p_value == pytest.approx(exact, rel=0.6)  # within the approximation's known error at n = 7


def test_mann_whitney_null_and_identical():
    t = mann_whitney([1.0, 1.0, 1.0], [1.0, 1.0])
    assert t.p_value == 1.0 and t.prob_b_greater == 0.5
    assert mann_whitney([], [1.0]) is None


def test_median_interval_takes_the_order_statistics_of_the_binomial_table():
    # Conover's table of the median's order-statistic interval at 95 %: n = 6 (1, 6), 10 (2, 9), 20 (6, 15), 50 (18, 33)
    for n, j, cover in ((6, 1, 1 - 2 / 64), (10, 2, 1 - 2 * 11 / 1024), (20, 6, None), (50, 18, None)):
        iv = median_interval(np.arange(1.0, n + 1.0)[::-1])  # any order
        assert (iv.rank, iv.low, iv.high, iv.n) == (j, float(j), float(n + 1 - j), n)
        assert iv.coverage >= 0.95 and (cover is None or iv.coverage == pytest.approx(cover))
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # [min, max] of 5 covers 1 - 2/32 < 95 %
    assert median_interval([]) is None
    assert median_interval([1.0, 2.0, float("nan"), 3.0, 4.0, 5.0]) is None  # NaN dropped: 5 values left
    assert median_interval(np.arange(7.0), confidence=0.9).rank == 1
    with pytest.raises(HarnessError, match="confidence must be in"):
        median_interval([1.0] * 10, confidence=1.0)


def test_median_interval_covers_the_true_median_as_often_as_it_says():
    rng = np.random.default_rng(3)
    x = rng.exponential(1.0, size=(4000, 10))  # true median ln 2
    hits = 0
    for row in x:
        iv = median_interval(row)
        hits += iv.low <= math.log(2) <= iv.high
    assert abs(hits / len(x) - median_interval(x[0]).coverage) < 0.015  # 0.979 exact; 4000 draws: ± 0.005 standard error
