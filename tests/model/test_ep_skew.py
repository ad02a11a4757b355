"""Skew under large EP (Chapter 9, §9.4.1, Fig. 9-21/9-22, example 9.5, footnotes 35–36)."""

import time

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.model.ep_skew import (
    Cut,
    card_exchange_s,
    card_rows,
    ep_layer_bound,
    exchange_lower_bound,
    hot_expert_card_load,
    random_routing_skew,
    s_expert,
    sample_uniform_topk,
    simulate_expert_rows,
)

KiB, MiB = 1024, 2**20
F_A = 6 * 4096 * 1536  # example 9.5: FLOPs per assignment
C_H100 = 0.5 * 989.4e12  # 494.7 TFLOP/s
UNIFORM = [[512] * 4] * 4
HOT = [[1280, 256, 256, 256]] * 4  # group totals [5120, 1024, 1024, 1024]
FABRIC = [Cut("inter-server", 200e9)]


@pytest.mark.parametrize("ep, hot_rows, mean, ratio", [
    # §9.4.1: ≈1108 rows (+8 %) at EP8, ≈349 (+36 %) at EP32, 128 (4×) at EP256
    (8, 1108, 1024, 1.08), (32, 349, 256, 1.36), (256, 128, 32, 4.0),
])
def test_hot_expert_rows_per_card(ep, hot_rows, mean, ratio):
    h = hot_expert_card_load(1024, 8, 256, ep, 128)
    assert h.hot_card_rows == pytest.approx(hot_rows, abs=0.5)
    assert h.mean_rows_per_card == mean
    assert h.max_over_mean == pytest.approx(ratio, abs=0.005)


def test_hot_card_exchange_at_ep256():
    # §9.4.1: 8 KiB rows at 50 GB/s: the hot card receives 1 MiB ≈21 µs, the mean card 256 KiB ≈5.2 µs;
    # from EP8 to EP256 the hot card's rows drop only ≈8.7×
    h = hot_expert_card_load(1024, 8, 256, 256, 128)
    assert h.hot_card_rows * 8 * KiB == 1 * MiB
    assert card_exchange_s(h.hot_card_rows, 8 * KiB, 50e9) == pytest.approx(21e-6, abs=0.05e-6)
    assert card_exchange_s(h.mean_rows_per_card, 8 * KiB, 50e9) == pytest.approx(5.2e-6, abs=0.05e-6)
    assert hot_expert_card_load(1024, 8, 256, 8, 128).hot_card_rows / h.hot_card_rows == pytest.approx(8.7, abs=0.05)


def test_sampler_draws_distinct_uniform_subsets():
    rng = np.random.default_rng(7)
    picks = sample_uniform_topk(rng, 120_000, 10, 3).T
    s = np.sort(picks, axis=1)
    assert (np.diff(s, axis=1) > 0).all()  # distinct experts per token
    counts = np.bincount(s[:, 0] * 100 + s[:, 1] * 10 + s[:, 2])
    counts = counts[counts > 0]
    assert len(counts) == 120  # every 3-subset of 10 appears
    assert counts.min() > 850 and counts.max() < 1150  # 1000 expected each; ±15 % is > 4σ


def test_simulation_conserves_assignments_and_is_seeded():
    rows = simulate_expert_rows(1024, 8, 256, 20, seed=3)
    assert rows.shape == (20, 256)
    assert (rows.sum(axis=1) == 8192).all()
    assert (rows <= 1024).all()
    assert np.array_equal(rows, simulate_expert_rows(1024, 8, 256, 20, seed=3))
    assert not np.array_equal(rows, simulate_expert_rows(1024, 8, 256, 20, seed=4))
    assert card_rows(rows, 8).sum(axis=1).tolist() == [8192] * 20


def test_random_routing_skew_ep8_and_ep256():
    # §9.4.1: 1000 batches, fixed seed: the busiest card is ≈4 % above the mean at EP8 and ≈52 % at EP256.
    # Standard error of the 1000-batch mean is ≈0.0005 (EP8) and ≈0.0025 (EP256); the tolerances cover
    # any seed, not only this one.
    r8, r256 = random_routing_skew(1024, 8, 256, [8, 256], 1000, seed=0)
    assert r8.mean_max_over_mean == pytest.approx(1.04, abs=0.01)
    assert r256.mean_max_over_mean == pytest.approx(1.52, abs=0.02)
    other = random_routing_skew(1024, 8, 256, [8, 256], 1000, seed=1)
    assert other[1].mean_max_over_mean == pytest.approx(1.52, abs=0.02)


def _simulate_ep256():
    return random_routing_skew(1024, 8, 256, [256], 1000, seed=0)[0]


def test_routing_simulation_benchmark(benchmark):
    # issue 3: 1000 batches × 8192 assignments at EP256 well under a second
    r = benchmark(_simulate_ep256)
    assert r.batches == 1000


def test_routing_simulation_is_well_under_a_second(speed_goals_judged):
    # the speed goal is judged only when benchmarks run (`make bench`): a shared CPU must not fail the suite
    best = min(_timed() for _ in range(3))
    if speed_goals_judged:
        assert best < 1.0, f"1000×8192 routing simulation took {best:.2f} s"


def _timed() -> float:
    t = time.perf_counter()
    _simulate_ep256()
    return time.perf_counter() - t


@pytest.mark.parametrize("name, a, d_bytes, bw, cuts, expect", [
    # example 9.5 table: dispatch, busiest-card compute, combine, barrier total (ms)
    ("uniform, cross-server", UNIFORM, 8 * KiB, 50e9, FABRIC, (0.336, 0.156, 0.336, 0.827)),
    ("hot group, cross-server", HOT, 8 * KiB, 50e9, FABRIC, (0.839, 0.391, 0.839, 2.068)),
    ("uniform, one 400G link", UNIFORM, 8 * KiB, 50e9, [Cut("one link", 50e9)], (1.342, 0.156, 1.342, 2.841)),
    ("hot group, FP8 dispatch", HOT, 4 * KiB, 50e9, FABRIC, (0.419, 0.391, 0.839, 1.649)),
    ("hot group, NVLink", HOT, 8 * KiB, 450e9, [], (0.093, 0.391, 0.093, 0.577)),
])
def test_example_9_5_table(name, a, d_bytes, bw, cuts, expect):
    b = ep_layer_bound(name, a, d_bytes, 8 * KiB, F_A, C_H100, bw, bw, cuts, (4, 4))
    got = (b.dispatch.bound_s, b.compute_s, b.combine.bound_s, b.barrier_total_s)
    for g, e in zip(got, expect):
        assert g * 1e3 == pytest.approx(e, abs=0.0006)


def test_example_9_5_volumes_and_skew():
    # 64 MiB each way; uniform 16 MiB per group, hot group 40 MiB and 8 MiB for the others; s_expert 1 -> 2.5
    d = exchange_lower_bound(HOT, 8 * KiB, "dispatch", 50e9, 50e9, FABRIC)
    assert d.total_bytes == 64 * MiB
    assert d.received_bytes == (40 * MiB, 8 * MiB, 8 * MiB, 8 * MiB)
    assert d.sent_bytes == (16 * MiB,) * 4
    assert d.limiter == "receiver"
    c = exchange_lower_bound(HOT, 8 * KiB, "combine", 50e9, 50e9, FABRIC)
    assert c.sent_bytes == (40 * MiB, 8 * MiB, 8 * MiB, 8 * MiB)  # combine: groups send back
    assert s_expert(UNIFORM) == 1.0
    assert s_expert(HOT) == 2.5
    # per assignment: ≈76 ns of H100 compute vs ≈164 ns of NIC time
    assert F_A / C_H100 == pytest.approx(76e-9, abs=0.5e-9)
    assert 8 * KiB / 50e9 == pytest.approx(164e-9, abs=0.5e-9)


def test_cut_mask_counts_only_crossing_pairs():
    a = [[100, 0], [0, 100]]
    only_cross = Cut("cross", 1.0, ((False, True), (True, False)))
    assert exchange_lower_bound(a, 1.0, "dispatch", 1e9, 1e9, [only_cross]).cut_s == 0.0
    same = Cut("same", 1.0, ((True, False), (False, True)))
    assert exchange_lower_bound(a, 1.0, "dispatch", 1e9, 1e9, [same]).cut_s == 200.0


def test_bad_inputs_are_refused():
    with pytest.raises(HarnessError, match=r"a_ij has shape 3×4 but the scenario has 4 sources × 4 expert groups"):
        ep_layer_bound("x", UNIFORM[:3], 8 * KiB, 8 * KiB, F_A, C_H100, 50e9, 50e9, expected_shape=(4, 4))
    with pytest.raises(HarnessError, match="rectangular matrix"):
        s_expert([[1, 2], [3]])
    with pytest.raises(HarnessError, match="finite count >= 0"):
        s_expert([[1, -2]])
    with pytest.raises(HarnessError, match=r"one bandwidth or one per endpoint \(4\), got 2"):
        exchange_lower_bound(UNIFORM, 1.0, "dispatch", [1e9, 1e9], 1e9)
    with pytest.raises(HarnessError, match=r"mask has shape \(1, 1\)"):
        exchange_lower_bound(UNIFORM, 1.0, "dispatch", 1e9, 1e9, [Cut("m", 1e9, ((True,),))])
    with pytest.raises(HarnessError, match=r"top_k \(9\) exceeds n_experts \(8\)"):
        simulate_expert_rows(16, 9, 8, 1, 0)
    with pytest.raises(HarnessError, match=r"n_experts \(256\) is not a multiple of ep \(3\)"):
        hot_expert_card_load(1024, 8, 256, 3, 128)
    with pytest.raises(HarnessError, match=r"hot_expert_rows must be in \[0, tokens\]"):
        hot_expert_card_load(1024, 8, 256, 8, 2000)
    with pytest.raises(HarnessError, match="seed must be an integer >= 0"):
        simulate_expert_rows(16, 2, 8, 1, -1)
