"""Expert replicas (Chapter 9, §9.4.2, example 9.6, Fig. 9-24, footnote 14)."""

import math

import pytest

from harness.errors import HarnessError
from harness.model.expert_replicas import (
    TiledExpertShape,
    card_time,
    copy_time_s,
    net_gain_s,
    payback_batches,
    plan_replicas,
    pool_stability,
    replica_memory_bytes,
)

MiB, GiB = 2**20, 2**30
SHAPE = TiledExpertShape(4096, 1536, 2.0, 2.0, tile_m=64, tile_n=128)
C, B = 0.5 * 989.4e12, 0.5 * 3350e9  # example 9.6: 494.7 TFLOP/s, 1675 GB/s


@pytest.fixture(scope="module")
def plan():
    return plan_replicas([128] * 8, 7, SHAPE, C, B, 64 * MiB)


def test_hot_card_traffic_reconstructs_921_mb():
    # example 9.6: card 0 reads and writes ≈921 MB per batch and is HBM-bound
    t = card_time(0, [128] * 8, SHAPE, C, B)
    assert t.hbm_bytes / 1e6 == pytest.approx(921, abs=0.5)
    assert t.bound == "memory"
    assert SHAPE.weight_bytes == 36 * MiB
    assert SHAPE.activation_bytes_per_row == 302 * 1024


def test_replicas_cut_the_hot_card(plan):
    # example 9.6: 7 replicas, 252 MiB; card 0 keeps 576 assignments; 0.550 -> 0.309 ms, ≈0.240 ms saved;
    # footnote 14: the saving is 402,784,256 bytes / 1675 GB/s ≈ 0.2404682 ms
    assert plan.feasible
    assert plan.replica_bytes_total == 252 * MiB
    assert plan.after[0].rows == 576
    assert plan.before_s == pytest.approx(0.550e-3, abs=0.0005e-3)
    assert plan.after_s == pytest.approx(0.309e-3, abs=0.0005e-3)
    assert plan.before[0].hbm_bytes - plan.after[0].hbm_bytes == 402_784_256
    assert plan.saving_per_batch_s == pytest.approx(402_784_256 / 1675e9, rel=1e-12)
    assert all(c.time_s < plan.after[0].time_s for c in plan.after[1:])


@pytest.mark.parametrize("bw, copy_ms, n_min, net16, net64", [
    # example 9.6 / footnote 14: NVLink 0.62220256 ms, payback 3, net ≈3.2 / ≈14.8 ms;
    # ConnectX-7 5.31982304 ms, payback 23, net ≈-1.5 / ≈10.1 ms
    (450e9, 0.62220256, 3, 3.2, 14.8),
    (50e9, 5.31982304, 23, -1.5, 10.1),
])
def test_copy_payback_and_net_gain(plan, bw, copy_ms, n_min, net16, net64):
    t = copy_time_s(7, SHAPE.weight_bytes, bw, 5e-6)
    assert t * 1e3 == pytest.approx(copy_ms, rel=1e-9)
    assert payback_batches(t, plan.saving_per_batch_s) == n_min
    assert (n_min - 1) * plan.saving_per_batch_s <= t < n_min * plan.saving_per_batch_s
    assert net_gain_s(16, t, plan.saving_per_batch_s) * 1e3 == pytest.approx(net16, abs=0.05)
    assert net_gain_s(64, t, plan.saving_per_batch_s) * 1e3 == pytest.approx(net64, abs=0.05)


def test_no_room_no_replica():
    # example 9.6: with only 32 MiB free a receiver cannot hold one 36 MiB expert
    p = plan_replicas([128] * 8, 7, SHAPE, C, B, 32 * MiB)
    assert not p.feasible
    assert "32 MiB free but one expert needs 36 MiB" in p.reason
    assert p.saving_per_batch_s == 0
    assert payback_batches(1e-3, p.saving_per_batch_s) is None


def test_replica_memory_budget():
    # §9.4.2: one 36 MiB replica in all 94 layers 3384 MiB ≈ 3.30 GiB; the 8 hottest layers 288 MiB (≈12× less)
    assert replica_memory_bytes(94, 1, 36 * MiB) == 3384 * MiB
    assert replica_memory_bytes(94, 1, 36 * MiB) / GiB == pytest.approx(3.30, abs=0.005)
    assert replica_memory_bytes(8, 1, 36 * MiB) == 288 * MiB


def test_pool_stability_condition():
    # §9.4.2: λ·E[F_j] < C_j for every card
    s = pool_stability(100.0, [1e12, 2e12], [494.7e12, 494.7e12])
    assert s.stable and s.card_utilisation[1] == pytest.approx(100 * 2e12 / 494.7e12)
    assert s.max_batches_per_s == pytest.approx(494.7e12 / 2e12)
    assert not pool_stability(300.0, [1e12, 2e12], [494.7e12, 494.7e12]).stable
    assert not pool_stability(1.0, [0.0], [1.0], [2e9], [1e9]).stable  # the link saturates first
    assert math.isinf(pool_stability(1.0, [0.0], [1.0]).max_batches_per_s)


def test_bad_inputs():
    with pytest.raises(HarnessError, match=r"replicas must be an integer in \[0, 8\]"):
        plan_replicas([128] * 8, 9, SHAPE, C, B, 64 * MiB)
    with pytest.raises(HarnessError, match="expert rows must be a non-empty list of integers >= 0"):
        plan_replicas([128, -1], 1, SHAPE, C, B, 64 * MiB)
    with pytest.raises(HarnessError, match="rows must be an integer >= 0"):
        SHAPE.hbm_bytes(-1)
    with pytest.raises(HarnessError, match="one FLOP/s for every card"):
        pool_stability(1.0, [1.0], [])
    with pytest.raises(HarnessError, match="tile_m must be a positive integer"):
        TiledExpertShape(4096, 1536, 2.0, 2.0, 0, 128)
