"""The timing core on workloads of known duration, and its statistics."""

import time

import pytest

from harness.errors import HarnessError
from microbench.timing import (
    QUICK, TimingPolicy, cache_state, percentile, plan_reps, rotation_sets, stability, summarize, time_cpu,
)


def busy_wait(duration_s: float) -> None:
    end = time.perf_counter_ns() + int(duration_s * 1e9)
    while time.perf_counter_ns() < end:
        pass


def test_summarize_known_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s.median_s == 3.0 and s.min_s == 1.0 and s.max_s == 5.0 and s.n == 5
    assert s.p10_s == pytest.approx(1.4) and s.p90_s == pytest.approx(4.6)  # numpy's linear interpolation
    assert s.cv == pytest.approx((2.0**0.5) / 3.0)


def test_percentile_and_empty():
    assert percentile([1.0], 90) == 1.0
    with pytest.raises(HarnessError):
        summarize([])


def test_plan_reps_groups_short_calls_and_fits_budget():
    pol = TimingPolicy(budget_s=1.0, target_sample_s=1e-3, min_reps=5, max_reps=1000)
    assert plan_reps(1e-6, pol) == (1000, 1000)  # 1 µs calls: 1000 per sample, budget allows 1000 samples
    assert plan_reps(0.1, pol) == (1, 10)
    assert plan_reps(10.0, pol) == (1, 5)  # never below min_reps


def test_policy_validation_names_field():
    with pytest.raises(HarnessError, match="budget_s"):
        TimingPolicy(budget_s=0)
    with pytest.raises(HarnessError, match="min_reps"):
        TimingPolicy(min_reps=0)


def test_busy_loop_of_known_duration():
    # A 2 ms busy loop: no sample may be short, and the fastest sample (the one no neighbour
    # pre-empted) lands within -1 % / +25 %; a shared, loaded CPU only adds time to the others.
    m = time_cpu(lambda: busy_wait(2e-3), TimingPolicy(budget_s=0.1, warmup_s=0.01, min_reps=10))
    assert m.timer == "perf_counter_ns" and m.inner_reps == 1
    assert 2e-3 * 0.99 <= m.stats.min_s <= 2e-3 * 1.25
    assert m.stats.median_s >= 2e-3 * 0.99
    assert len(m.times_s) == m.stats.n >= 10


def test_sleep_of_known_duration():
    # time.sleep(5 ms) never returns early, so no sample may be short; the fastest sample is judged on the
    # upper side only against a unit error (a busy machine delays wake-ups by an amount no test can bound).
    m = time_cpu(lambda: time.sleep(5e-3), TimingPolicy(budget_s=0.1, warmup_s=0.0, min_warmup=1, min_reps=8))
    assert 5e-3 <= m.stats.min_s <= m.stats.median_s
    assert m.stats.min_s < 0.1


def test_tiny_calls_are_grouped_and_divided():
    # 20 µs busy calls are below the 1 ms sample target: grouped ~50 per sample; per-call time within 50 %.
    m = time_cpu(lambda: busy_wait(20e-6), TimingPolicy(budget_s=0.1, warmup_s=0.01, target_sample_s=1e-3, min_reps=5))
    assert m.inner_reps > 10
    assert 20e-6 * 0.99 <= m.stats.min_s <= 20e-6 * 1.5
    assert m.stats.median_s >= 20e-6 * 0.99


def test_unstable_verdict_has_remedy():
    noisy = summarize([1.0, 1.0, 2.0, 3.0, 1.0, 2.5])
    bad, remedy = stability(noisy, QUICK)
    assert bad and "--budget-s" in remedy
    ok, none = stability(summarize([1.0, 1.01, 0.99, 1.0]), QUICK)
    assert not ok and none is None
    # one preempted sample inflates the CV but not the p10-p90 spread: not flagged
    spiky = summarize([1.0] * 30 + [20.0])
    assert spiky.cv > 0.1 and not stability(spiky, QUICK)[0]


def test_rotation_sets_exceed_twice_the_cache():
    assert rotation_sets(10e6, 50e6) == 8  # capped at max_sets
    assert rotation_sets(40e6, 50e6) == 3
    assert rotation_sets(200e6, 50e6) == 1
    assert rotation_sets(10e6, None) == 1
    assert cache_state(200e6, 1, 50e6, "L2").startswith("cold")
    assert cache_state(10e6, 2, 50e6, "L2").startswith("warm")


def test_summarize_speed(benchmark):
    xs = [float(i % 97) for i in range(10_000)]
    s = benchmark(summarize, xs)
    assert s.n == 10_000
