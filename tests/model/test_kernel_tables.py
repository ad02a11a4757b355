"""Kernel latency tables: exact at measured points, log-linear between, never faster beyond the grid, holes filled."""

import math

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.model.kernel_tables import AttentionKey, KernelTables, grid_from_points


def _gemm_points():
    # latency = 2 µs + M·N·K / 1e15 s on a full grid, one point missing (M=64, N=256, K=256)
    pts, lat = [], []
    for m in (1, 16, 64, 256):
        for n in (256, 1024):
            for k in (256, 1024):
                if (m, n, k) == (64, 256, 256):
                    continue
                pts.append((m, n, k))
                lat.append(2e-6 + m * n * k / 1e15)
    return np.array(pts, dtype=float), np.array(lat)


def test_grid_is_exact_at_measured_points_and_log_linear_between():
    t = grid_from_points(*_gemm_points(), "gemm")
    assert t.time_s(16, 1024, 256) == pytest.approx(2e-6 + 16 * 1024 * 256 / 1e15)
    a, b = t.time_s(16, 256, 256), t.time_s(64, 256, 1024)
    mid = t.time_s(32, 256, 256)  # halfway in log M between 16 and 64: geometric mean of the two latencies
    assert mid == pytest.approx(math.sqrt(a * t.time_s(64, 256, 256)))
    assert b > 0


def test_below_the_grid_is_clamped_and_above_it_scales_with_the_work():
    t = grid_from_points(*_gemm_points(), "gemm")
    assert t.time_s(0.5, 256, 256) == pytest.approx(t.time_s(1, 256, 256))
    assert t.time_s(512, 1024, 1024) == pytest.approx(2 * t.time_s(256, 1024, 1024))


def test_a_hole_is_filled_from_its_measured_neighbour():
    t = grid_from_points(*_gemm_points(), "gemm")
    assert t.time_s(64, 256, 256) == pytest.approx(t.time_s(16, 256, 256))  # nearest along M


def test_no_valid_point_is_refused():
    with pytest.raises(HarnessError, match="no positive finite latency"):
        grid_from_points(np.array([[1.0, 2.0, 3.0]]), np.array([float("nan")]), "gemm")


def test_attention_reads_the_nearest_measured_shape_scaled_by_heads():
    pts = np.array([(b, n) for b in (1, 8) for n in (128, 1024)], dtype=float)
    lat = np.array([1e-5 + b * n * 1e-9 for b, n in pts])
    kt = KernelTables("h200-sxm", "test", decode_attention={AttentionKey(8, 1, 128, "bf16"): grid_from_points(pts, lat, "a")})
    same = kt.attention_s("decode", AttentionKey(8, 1, 128, "bf16"), 8, 1024)
    assert same == pytest.approx(1e-5 + 8 * 1024e-9)
    assert kt.attention_s("decode", AttentionKey(16, 2, 128, "bf16"), 8, 1024) == pytest.approx(2 * same)
    assert kt.attention_s("decode", AttentionKey(8, 1, 64, "bf16"), 8, 1024) is None  # no table of that head dim


def test_moe_and_mla_tables():
    from harness.model.kernel_tables import MoeKey

    tok = np.array([[1.0], [64.0], [4096.0]])
    key = MoeKey("fp8", 4096, 1536, 8, 128, 8, 1)
    mla = grid_from_points(np.array([(b, n) for b in (1, 64) for n in (128, 8192)], dtype=float), np.full(4, 2e-5), "m")
    kt = KernelTables("h200-sxm", "t", moe={key: grid_from_points(tok, np.array([1e-5, 2e-5, 4e-4]), "moe")},
                      mla_decode={16: mla})
    assert kt.moe_s(key, 64) == pytest.approx(2e-5)
    assert kt.moe_s(MoeKey("fp8", 4096, 1536, 8, 128, 4, 2), 64) is None  # another layout: not measured
    assert kt.mla_s("decode", 16, 8, 1024) == pytest.approx(2e-5)
    assert kt.mla_s("decode", 32, 8, 1024) == pytest.approx(4e-5)  # twice the heads of the nearest measured count
    assert kt.mla_s("prefill", 16, 1, 128) is None
