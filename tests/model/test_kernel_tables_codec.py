"""Kernel tables as a database entry stores them: the round trip keeps every grid point to LOG_STEP, bad blocks are named."""

import json
import math

import numpy as np
import pytest

from harness.model.kernel_tables import AttentionKey, KernelTables, MoeKey, grid_from_points
from harness.model.kernel_tables_codec import GRID_FORMAT, LOG_STEP, tables_from_dict, tables_to_dict


def _grid(dims: int, seed: int, n: int = 5):
    rng = np.random.default_rng(seed)
    axes = [np.unique(np.round(np.geomspace(1, 4096, n) * (1 + d))) for d in range(dims)]
    pts = np.array(np.meshgrid(*axes, indexing="ij")).reshape(dims, -1).T
    # latencies from 1 µs to seconds, with a jump (a tile change) and noise: nothing smooth to lean on
    lat = 1e-6 * np.prod(pts, axis=1) ** 0.7 * rng.uniform(0.8, 1.25, len(pts))
    lat[len(lat) // 2] *= 2.0
    return grid_from_points(pts, lat, f"test {dims}d")


@pytest.fixture(scope="module")
def tables():
    ak = AttentionKey(32, 8, 128, "bf16")
    return KernelTables(
        "h200-sxm", "imported kernel data: test tables",
        gemm={"bf16": _grid(3, 1), "fp8": _grid(3, 2), "fp8-block": _grid(3, 3, n=4)},
        decode_attention={ak: _grid(2, 4), AttentionKey(8, 1, 128, "fp8"): _grid(2, 5), AttentionKey(64, 8, 64, "bf16", 128): _grid(2, 6, n=3)},
        prefill_attention={ak: _grid(2, 7)},
        allreduce={2: _grid(1, 8, n=9), 8: _grid(1, 9, n=9)},
        moe={MoeKey("fp8", 7168, 2048, 8, 256, 1, 8): _grid(1, 10), MoeKey("bf16", 4096, 1536, 8, 128, 2, 1): _grid(1, 11)},
        mla_decode={16: _grid(2, 12)}, mla_prefill={16: _grid(2, 13), 128: _grid(2, 14)},
        smallest_kernel_s=2.5e-6, notes=("no MLA at 64 heads",),
    )


def test_round_trip_keeps_every_point_to_the_log_step(tables):
    d = tables_to_dict(tables)
    assert d["format"] == GRID_FORMAT and d["log_step"] == LOG_STEP
    back = tables_from_dict(json.loads(json.dumps(d)))  # through JSON text, as an entry is stored
    assert (back.gpu, back.source, back.smallest_kernel_s, back.notes) == (tables.gpu, tables.source, 2.5e-6, tables.notes)
    for op in ("gemm", "decode_attention", "prefill_attention", "allreduce", "moe", "mla_decode", "mla_prefill"):
        a, b = getattr(tables, op), getattr(back, op)
        assert set(a) == set(b), op
        for k in a:
            assert a[k].axes == b[k].axes and a[k].extrapolate == b[k].extrapolate
            assert np.abs(a[k].log_latency - b[k].log_latency).max() <= LOG_STEP / 2 + 1e-12, (op, k)
    # what the step model reads: the same latency to 0.05 %, inside, between and beyond the measured points
    for m, n, k in ((1, 1, 1), (300, 20, 5000), (9000, 9000, 9000)):
        assert back.gemm_s("fp8", m, n, k) == pytest.approx(tables.gemm_s("fp8", m, n, k), rel=LOG_STEP / 2 * 1.01)
    key = AttentionKey(32, 8, 128, "bf16")
    assert back.attention_s("decode", key, 7, 3000) == pytest.approx(tables.attention_s("decode", key, 7, 3000), rel=6e-4)
    assert back.allreduce_s(8, 1e6) == pytest.approx(tables.allreduce_s(8, 1e6), rel=6e-4)
    # stable: the tables read back, encoded afresh, are the same text (a refiled entry does not drift)
    fresh = KernelTables(back.gpu, back.source, back.gemm, back.decode_attention, back.prefill_attention, back.allreduce,
                         back.moe, back.mla_decode, back.mla_prefill, back.smallest_kernel_s, back.notes)
    assert tables_to_dict(fresh) == json.loads(json.dumps(d))


def test_a_grid_holding_extreme_latencies_still_round_trips():
    g = grid_from_points(np.array([[1.0], [2.0], [3.0]]), np.array([1e-9, 10.0, 1e3]), "extremes")
    back = tables_from_dict(tables_to_dict(KernelTables("b200", "x", allreduce={4: g})))
    assert back.allreduce[4].time_s(2.0) == pytest.approx(10.0, rel=6e-4)
    assert math.exp(back.allreduce[4].log_latency[0]) == pytest.approx(1e-9, rel=6e-4)


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.update(format="kernel-grids/9"), r"format 'kernel-grids/9' is not 'kernel-grids/1'"),
    (lambda d: d["blocks"][0].update(log_latency="not base64!"), r"blocks\[0\] \(gemm\): log_latency is not round"),
    (lambda d: d["blocks"][0].update(keys=d["blocks"][0]["keys"][:1]), r"blocks\[0\] \(gemm\): log_latency holds \d+ values; its keys and axes need"),
    (lambda d: d["blocks"][1].update(op="conv"), r"blocks\[1\] \(conv\): op 'conv' is not one of gemm"),
    (lambda d: d["blocks"][0]["axes"][0].reverse(), r"blocks\[0\] \(gemm\): axes must be non-empty lists of increasing"),
    (lambda d: d["blocks"][0].pop("axes"), r"blocks\[0\] \(gemm\): field 'axes' is missing"),
    (lambda d: d.update(smallest_kernel_s=-1), r"smallest_kernel_s must be a positive number"),
])
def test_a_damaged_dict_is_a_value_error_naming_the_block_and_field(tables, damage, message):
    d = json.loads(json.dumps(tables_to_dict(tables)))
    damage(d)
    with pytest.raises(ValueError, match=message):
        tables_from_dict(d)
