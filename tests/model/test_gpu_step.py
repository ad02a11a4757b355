"""The per-operator step model: operators add up, TP splits them, FP8 GEMMs run at the FP8 peak, tables replace formulas."""

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.model.gpu_step import ForwardBatch, GpuStepModel, KernelConstants, attended_pairs, sliding_pairs, weight_bytes_per_card
from harness.model.kernel_tables import KernelTables, grid_from_points
from harness.model.parallel import Parallel
from harness.model.precision import get_precision
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model

H200 = get_gpu("h200-sxm")
L70 = get_model("llama-3.1-70b")


def _model(tp=1, precision="fp8", **kw):
    return GpuStepModel(L70, H200, Parallel(tp=tp), get_precision(precision), link_bandwidth_bytes_per_s=450e9, **kw)


def test_decode_at_batch_1_is_the_weight_stream_at_the_default_efficiency():
    # uncalibrated: FP8 weights (1 byte per parameter; embeddings and LM head BF16) at 50 % of 4.8 TB/s
    b = _model().breakdown(ForwardBatch(1, 1, 0.0, 1.0, 1, 0))
    lin_params = 80 * (8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    assert b.gemm_s == pytest.approx(lin_params * 1.0 / (0.5 * 4.8e12), rel=0.01)
    assert b.total_s == pytest.approx(b.gemm_s + b.attention_s + b.elementwise_s + b.lm_head_s)


def test_fp8_prefill_runs_at_the_fp8_peak():
    fp8, bf16 = _model(precision="fp8"), _model(precision="bf16")
    n = 8192
    fb = ForwardBatch(n, 1, attended_pairs(L70, n, 0), 0.0, 0, 1)
    assert bf16.breakdown(fb).gemm_s / fp8.breakdown(fb).gemm_s == pytest.approx(2.0, rel=0.02)


def test_tp_splits_the_gemms_and_adds_two_allreduces_per_layer():
    one, eight = _model(1), _model(8)
    fb = ForwardBatch(4, 4, 0.0, 4 * 1500.0, 4, 0)
    assert eight.breakdown(fb).gemm_s == pytest.approx(one.breakdown(fb).gemm_s / 8, rel=0.05)
    # ring α–β on NVLink: (2·80 + 1) all-reduces of 4 × 8192 × 2 bytes, 14 steps of 5 µs each
    expect = 161 * (14 * 5e-6 + 14 / 8 * 4 * 8192 * 2 / 450e9)
    assert eight.breakdown(fb).allreduce_s == pytest.approx(expect)


def test_measured_tables_replace_the_formula_where_they_cover_the_operator():
    m = np.array([(mm, n, k) for mm in (1, 4096) for n in (1024, 65536) for k in (1024, 32768)], dtype=float)
    tables = KernelTables("h200-sxm", "fixture", gemm={"fp8": grid_from_points(m, np.full(len(m), 1e-5), "g")},
                          smallest_kernel_s=2e-6)
    sm = _model(tables=tables)
    b = sm.breakdown(ForwardBatch(1, 1, 0.0, 1.0, 1, 0))
    assert b.gemm_s == pytest.approx(80 * 4 * 1e-5)  # four FP8 GEMMs per layer, each read as 10 µs
    assert b.elementwise_s >= 80 * 3 * 2e-6  # three element-wise kernels per layer at the smallest measured kernel


def test_weights_per_card_and_refusals():
    assert weight_bytes_per_card(L70, Parallel(tp=8), get_precision("fp8")) == pytest.approx(
        weight_bytes_per_card(L70, Parallel(tp=1), get_precision("fp8")) / 8, rel=0.01)
    with pytest.raises(HarnessError, match="attention_dp > 1"):
        GpuStepModel(L70, H200, Parallel(tp=2, attention_dp=2, moe_tp=4), get_precision("fp8"))
    with pytest.raises(HarnessError, match="A100.*no FP8|no FP8"):
        GpuStepModel(L70, get_gpu("a100-80gb-sxm"), Parallel(), get_precision("fp8")).prefill_time_s(16)


def test_sliding_window_pairs():
    assert sliding_pairs(4, 0, 128) == 1 + 2 + 3 + 4
    assert sliding_pairs(4, 200, 128) == 4 * 128
    assert sliding_pairs(4, 126, 128) == 127 + 128 + 128 + 128
    gpt = get_model("gpt-oss-120b")  # half the layers windowed at 128
    assert attended_pairs(gpt, 1, 1000) == pytest.approx((1001 + 128) / 2)


def test_constants_refuse_an_efficiency_above_peak():
    with pytest.raises(HarnessError, match="above 100 %"):
        KernelConstants("h200-sxm", attention_bandwidth_efficiency=1.2)
