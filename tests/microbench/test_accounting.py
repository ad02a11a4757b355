"""Accounting formulas of the GPU suites, checked by hand: GEMM and grouped-GEMM FLOPs/bytes with padding,
copy byte conventions, busbw factors, PCIe/NVLink peaks, decode bytes of weights + KV at batch and context."""

import pytest

from harness.model.forward import decode_step_work
from harness.specs.models import get_model
from microbench.comm import bandwidths, bus_factor, nccl_world
from microbench.backends import cpu_has_native_bf16
from microbench.gemm import OUTPUT_DTYPE, gemm_l2_mode, gemm_work
from microbench.gpu_link import PcieLink, nvlink_peak, nvml_bus_id, sysfs_bus_id
from microbench.kernel_profile import aggregate, table_rows
from microbench.moe import CHAPTER_COUNTS, group_offsets, group_rows, grouped_work
from microbench.transfer import ALPHA_KINDS, MODEL_ALPHA, copy_method, copy_ring_slots, counted_bytes


def test_gemm_bytes_and_flops():
    w = gemm_work(512, 4096, 1024, 2)
    assert w.useful_flops == 2 * 512 * 4096 * 1024
    assert w.useful_bytes == (512 * 1024 + 1024 * 4096 + 512 * 4096) * 2


def test_fp8_gemm_counts_a_bf16_output():
    assert OUTPUT_DTYPE["fp8"] == "bf16"
    w = gemm_work(8192, 8192, 8192, 1, 2)
    assert w.useful_bytes == 8192 * 8192 * (1 + 1 + 2)  # A, W in e4m3; C in bf16


def test_gemm_l2_mode():
    assert gemm_l2_mode(10e6, 12, 50e6) == "rotated"  # 120 MB of sets > 2x 50 MB
    assert gemm_l2_mode(10e6, 8, 50e6) == "flush"  # capped below 2x L2: flush instead
    assert gemm_l2_mode(10e6, 1, None) == "flush"


def test_grouped_gemm_padding_chapter_example():
    H, I = 4096, 1536
    counts = list(CHAPTER_COUNTS)  # [32,16,8,4,2,1,1,0]
    assert sum(group_rows(counts, "tile", 32)) == 224 and sum(group_rows(counts, "max", 32)) == 256
    assert group_rows(counts, "exact", 32) == counts == group_rows(counts, "loop", 32)
    assert group_offsets([32, 16, 0, 8]) == [32, 48, 48, 56]
    pe = 3 * H * I
    exact = grouped_work(counts, counts, H, I, 2)
    tile = grouped_work(counts, group_rows(counts, "tile", 32), H, I, 2)
    mx = grouped_work(counts, group_rows(counts, "max", 32), H, I, 2)
    assert exact.useful_flops == tile.useful_flops == mx.useful_flops == 2 * 64 * pe
    assert exact.hw_flops == exact.useful_flops
    assert tile.hw_flops / tile.useful_flops == pytest.approx(3.5) and mx.hw_flops / mx.useful_flops == pytest.approx(4.0)
    # bytes: 7 experts with tokens stream their weights; padded-to-max runs all 8
    assert exact.useful_bytes == 7 * pe * 2 + 2 * 64 * H * 2
    assert mx.hw_bytes == 8 * pe * 2 + 2 * 256 * H * 2
    with pytest.raises(ValueError):
        group_rows(counts, "nope", 32)


def test_copy_byte_conventions():
    assert counted_bytes("d2d", 1000) == (2000.0, "read+write")
    assert counted_bytes("d2d-sm", 1000)[0] == 2000.0
    assert counted_bytes("h2d-pinned", 1000) == (1000.0, "once")
    assert counted_bytes("peer", 1000)[0] == 1000.0
    assert MODEL_ALPHA in ALPHA_KINDS and set(ALPHA_KINDS) == {"stream", "single"}
    assert copy_method("ce", "single") == "copy_engine:single" and copy_method("sm", "stream") == "sm_kernel:pipelined"


def test_copy_ring_exceeds_twice_the_l2():
    l2 = 60e6
    n = copy_ring_slots(16 * 2**20, "d2d", l2)  # 16 MiB d2d touches 32 MiB per copy
    assert n * 2 * 16 * 2**20 >= 2 * l2
    assert copy_ring_slots(16 * 2**20, "h2d-pinned", l2) * 16 * 2**20 >= 2 * l2
    assert copy_ring_slots(2**30, "d2d", l2) == 1
    assert copy_ring_slots(4096, "d2d", l2) == 64  # capped: the case's cache_state then says "warm"


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("all_to_all", 8, 0.875), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0),
])
def test_busbw_factors_are_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_busbw_from_algbw():
    alg, bus = bandwidths("all_reduce", 1e9, 0.01, 8)
    assert alg == pytest.approx(100e9) and bus == pytest.approx(175e9)
    assert nccl_world(1) == 1 and nccl_world(4) == 4 and nccl_world(16) == 8
    with pytest.raises(ValueError):
        bus_factor("scatter", 2)


def test_pcie_peak_uses_the_trained_width():
    full = PcieLink("00000000:3B:00.0", 5, 16, 5, 16, 0, "NVML")
    assert full.peak().bytes_per_s == pytest.approx(3.938e9 * 16) and not full.degraded
    x8 = PcieLink("00000000:3B:00.0", 5, 16, 1, 8, 0, "NVML")  # idle gen1, trained x8
    assert x8.degraded and x8.peak().bytes_per_s == pytest.approx(3.938e9 * 8)
    assert "TRAINED DOWN to x8 of x16" in x8.peak().source
    assert PcieLink(None, None, None, None, None, None, "NVML unavailable").peak().bytes_per_s is None
    assert x8.to_dict()["current_width"] == 8 and x8.to_dict()["degraded"]


def test_bus_id_formats():
    assert nvml_bus_id(0, 0x3B, 0) == "00000000:3B:00.0"
    assert sysfs_bus_id(0, 0x3B, 0) == "0000:3b:00.0"


def test_nvlink_peak():
    assert nvlink_peak([4] * 18).bytes_per_s == pytest.approx(450e9)  # H100/H200 SXM
    assert nvlink_peak([3] * 12).bytes_per_s == pytest.approx(300e9)  # A100 SXM
    assert nvlink_peak([]).bytes_per_s is None
    assert nvlink_peak([9]).bytes_per_s is None


def test_decode_bytes_weights_plus_kv_at_batch_and_context():
    m = get_model("qwen3-8b")
    kv_tok = 2 * m.n_layers * m.n_kv_heads * m.head_dim * 2  # K and V, bf16: 147456 B/token
    assert kv_tok == 147456
    base = decode_step_work(m, 1, 4096, 2, 2)
    # the weights are read once whatever the batch; the KV grows with batch × context
    assert decode_step_work(m, 8, 4096, 2, 2).bytes - base.bytes == pytest.approx(7 * 4096 * kv_tok)
    assert decode_step_work(m, 1, 8192, 2, 2).bytes - base.bytes == pytest.approx(4096 * kv_tok)
    assert base.weight_bytes == pytest.approx(base.bytes - 4096 * kv_tok)
    assert 14e9 < base.weight_bytes < 17e9  # ~8 B parameters in bf16 (with the LM head)


def test_kernel_breakdown_aggregation():
    events = [("gemv", 1e-3)] * 6 + [("rmsnorm", 1e-4)] * 6 + [(f"k{i}", 1e-6) for i in range(5)]
    rows = aggregate(events, steps=3, what="cuda-kernel device time", top=2)
    assert [r.kernel for r in rows] == ["gemv", "rmsnorm", "(5 other kernels)"]
    assert rows[0].calls_per_step == 2 and rows[0].time_per_step_s == pytest.approx(2e-3)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    t = table_rows("decode:x", rows, step_s=3e-3)
    assert t[0]["kernel_sum_over_step"] == pytest.approx(sum(r.time_per_step_s for r in rows) / 3e-3)


def test_native_bf16_detection():
    assert cpu_has_native_bf16("flags\t: fpu sse avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16("Features\t: fp asimd bf16\n")  # Arm
    assert not cpu_has_native_bf16("flags\t: fpu sse avx2 fma\n")
    assert cpu_has_native_bf16("")  # unknown: do not skip
