"""Cache-aware routing (Chapter 9, §9.5.4, example 9.7, exercise 9-9)."""

import pytest

from harness.errors import HarnessError
from harness.model.cache_routing import (
    affinity_choice,
    affinity_threshold_s,
    fetch_link_load,
    fetch_tie_bandwidth_bytes_per_s,
    min_hit_probability_for_mean,
    min_hit_probability_for_quantile,
    route_path,
    t_first_s,
    two_point_ttft,
)
from harness.model.kv import kv_bytes
from harness.model.kv_tiers import serial_fetch_time_s
from harness.model.stages import Workload, stage_rates
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model

Q8 = get_model("qwen3-8b")
A100 = get_gpu("a100-80gb-sxm")
V = kv_bytes(Q8, 8192, 2)
C_HIT = stage_rates(A100, Q8, Workload(8448, 1, 8192, 1)).prefill_s_per_request  # 30.9 ms
C_FULL = stage_rates(A100, Q8, Workload(8448, 1, 0, 1)).prefill_s_per_request  # 887 ms
FIXED = 0.010 + V / 25e9  # lookup + PCIe


def test_t_first_overlap_vs_serial():
    # §9.5.4: Q = 80 ms, fetch 60 ms, compute 10 ms -> 90 ms overlapped, 150 ms serial
    assert t_first_s(0.08, 0.06, 0.01) == pytest.approx(0.090)
    assert t_first_s(0.08, 0.06, 0.01, overlap=False) == pytest.approx(0.150)


def test_example_9_7_paths():
    # Example 9.7: A local hit 250 + 30.9 ≈ 281 ms; B recompute 20 + 887 ≈ 907 ms; fetch over 50 GbE ≈ 282 ms, 200 GbE ≈ 137 ms
    assert C_HIT == pytest.approx(30.9e-3, abs=0.05e-3)
    assert C_FULL == pytest.approx(887e-3, abs=0.5e-3)
    a = route_path("local-hit", "A", 0.250, 0, C_HIT)
    b = route_path("recompute", "B", 0.020, 0, C_FULL)
    f50 = route_path("fetch-50", "B", 0.020, serial_fetch_time_s(V, [6.25e9, 25e9], 0.010), C_HIT)
    f200 = route_path("fetch-200", "B", 0.020, serial_fetch_time_s(V, [25e9, 25e9], 0.010), C_HIT)
    assert a.t_first_s == pytest.approx(0.281, abs=0.5e-3)
    assert b.t_first_s == pytest.approx(0.907, abs=0.5e-3)
    assert f50.t_first_s == pytest.approx(0.282, abs=1e-3)
    assert f50.t_first_s - a.t_first_s == pytest.approx(1.6e-3, abs=0.1e-3)  # Fig. 9-39: ≈1.6 ms later than A
    assert f200.t_first_s == pytest.approx(0.137, abs=1e-3)


def test_tie_bandwidths():
    # §9.5.4: 191.7 ms budget -> 6.30 GB/s ties A's hit; recompute tie ≈ 1.48 GB/s
    a_t = 0.250 + C_HIT
    b_t = 0.020 + C_FULL
    tie_a = fetch_tie_bandwidth_bytes_per_s(a_t, 0.020, C_HIT, V, FIXED)
    assert a_t - C_HIT - FIXED == pytest.approx(191.7e-3, abs=0.1e-3)
    assert tie_a == pytest.approx(6.30e9, abs=0.01e9)
    assert fetch_tie_bandwidth_bytes_per_s(b_t, 0.020, C_HIT, V, FIXED) == pytest.approx(1.48e9, abs=0.01e9)
    # at the tie bandwidth the fetch path lands exactly on the target
    assert t_first_s(0.020, serial_fetch_time_s(V, [tie_a, 25e9], 0.010), C_HIT) == pytest.approx(a_t)
    assert fetch_tie_bandwidth_bytes_per_s(0.05, 0.060, C_HIT, V, FIXED) is None  # Q alone exceeds the target


def test_two_point_model():
    # §9.5.4: A waits 80 ms; hit 110.9 ms, miss 967.2 ms; E = 967.2 − 856.3p; p > 7.0 % beats 907 ms;
    # p = 0.9: mean 196.5 ms, p99 967 ms; p99 ≤ 220 ms needs p ≥ 99 %
    hit, miss = 0.080 + C_HIT, 0.080 + C_FULL
    assert hit == pytest.approx(110.9e-3, abs=0.05e-3)
    assert miss == pytest.approx(967.2e-3, abs=0.05e-3)
    assert miss - hit == pytest.approx(856.3e-3, abs=0.1e-3)
    assert min_hit_probability_for_mean(hit, miss, 0.020 + C_FULL) == pytest.approx(0.070, abs=0.001)
    r = two_point_ttft(hit, miss, 0.9)
    assert r.mean_s == pytest.approx(196.5e-3, abs=0.1e-3)
    assert r.quantile_s == pytest.approx(0.967, abs=0.5e-3)
    assert min_hit_probability_for_quantile(hit, miss, 0.220, 0.99) == 0.99
    assert two_point_ttft(hit, miss, 0.99).quantile_s == hit
    assert two_point_ttft(hit, miss, 0.98).quantile_s == miss
    assert min_hit_probability_for_quantile(hit, miss, 0.05) is None


def test_fetch_link_load():
    # §9.5.4: 16 fetches/s ≈ 19.3 GB/s, ≈77 % of 25 GB/s
    ll = fetch_link_load(16, V, 25e9)
    assert ll.demand_bytes_per_s == pytest.approx(19.3e9, rel=2e-3)
    assert ll.utilization == pytest.approx(0.77, abs=0.005)


def test_affinity_threshold():
    # §9.5.4 (DeepSeek V4.1): 4.666 ms transfer + 8 ms SWA restore = 12.666 ms; wait 10 ms -> A, 20 ms -> B
    assert affinity_threshold_s([0.004666, 0.008]) == pytest.approx(12.666e-3)
    assert affinity_choice(0.010, [0.004666, 0.008]).choice == "cache-holder"
    assert affinity_choice(0.020, [0.004666, 0.008]).choice == "free-instance"


def test_validation():
    with pytest.raises(HarnessError, match="hit_probability"):
        two_point_ttft(0.1, 1.0, 1.5)
    with pytest.raises(HarnessError, match="must not exceed miss_s"):
        two_point_ttft(2.0, 1.0, 0.5)
    with pytest.raises(HarnessError, match="queue_s"):
        t_first_s(-1, 0, 0)
