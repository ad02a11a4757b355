"""Attention/FFN split vs PD (Chapter 9, §9.3.4, example 9.4, Fig. 9-18, footnotes 3 and 6)."""

import pytest

from harness.errors import HarnessError
from harness.model.af_split import af_transfer, critical_startup_latency_s, request_transfer
from harness.model.kv import kv_bytes
from harness.specs.models import get_model

KiB, GiB = 1024, 2**30
QWEN = get_model("qwen3-8b")
GQA = kv_bytes(QWEN, 8192, 2.0)  # 1.125 GiB
MLA = kv_bytes(get_model("deepseek-v3"), 8192, 2.0)  # 549 MiB, footnote 6: 575,668,224 bytes


def test_af_decode_step_of_qwen3_8b():
    # example 9.4: 8192 B per transfer, 72 transfers, 576 KiB; 23.6 µs payload + 360 µs launches ≈ 0.384 ms
    a = af_transfer(QWEN, 2.0, 25e9, 5e-6)
    assert a.bytes_per_transfer == 8192
    assert a.transfers == 72
    assert a.payload_bytes == 576 * KiB
    assert a.payload_s == pytest.approx(23.6e-6, abs=0.05e-6)
    assert a.startup_s == pytest.approx(360e-6)
    assert a.total_s == pytest.approx(0.384e-3, abs=0.0005e-3)


def test_af_prefill_moves_4_5_gib():
    # example 9.4: a dense AF prefill of 8192 tokens carries 4.5 GiB, ≈193 ms before launches
    a = af_transfer(QWEN, 2.0, 25e9, 5e-6, tokens=8192)
    assert a.payload_bytes == 4.5 * GiB
    assert a.payload_s == pytest.approx(193e-3, abs=0.5e-3)


def test_critical_startup_latency():
    # §9.3.4: α* ≈ 680 / 340 µs (GQA) and 324 / 162 µs (MLA) at 25 / 50 GB/s; footnote 6: 23003136/71 ns
    v_af = 576 * KiB
    assert GQA == 1.125 * GiB and MLA == 575_668_224
    assert critical_startup_latency_s(GQA, v_af, 72, 25e9) == pytest.approx(680e-6, abs=0.5e-6)
    assert critical_startup_latency_s(GQA, v_af, 72, 50e9) == pytest.approx(340e-6, abs=0.5e-6)
    assert critical_startup_latency_s(MLA, v_af, 72, 25e9) == pytest.approx(23003136e-9 / 71, rel=1e-12)
    assert critical_startup_latency_s(MLA, v_af, 72, 25e9) == pytest.approx(324e-6, abs=0.5e-6)
    assert critical_startup_latency_s(MLA, v_af, 72, 50e9) == pytest.approx(162e-6, abs=0.5e-6)


def test_at_the_critical_latency_both_sides_are_equal():
    a_star = critical_startup_latency_s(GQA, 576 * KiB, 72, 25e9)
    step = af_transfer(QWEN, 2.0, 25e9, a_star)
    assert step.total_s == pytest.approx(GQA / 25e9 + a_star, rel=1e-12)


def test_whole_request_af_vs_pd():
    # §9.3.4: 1024 steps of AF ≈393 ms, 8.1× one GQA PD transfer (48.3 ms), 17× one compact MLA one (23.0 ms)
    step = af_transfer(QWEN, 2.0, 25e9, 5e-6)
    g = request_transfer("gqa", GQA, step, 1024, 25e9, 5e-6)
    m = request_transfer("mla", MLA, step, 1024, 25e9, 5e-6)
    assert g.af_s == pytest.approx(393e-3, abs=0.5e-3)
    assert g.pd_s == pytest.approx(48.32338208e-3, rel=1e-9)  # footnote 3
    assert g.af_over_pd == pytest.approx(8.1, abs=0.05)
    assert m.pd_s == pytest.approx(23.0e-3, abs=0.05e-3)
    assert m.af_over_pd == pytest.approx(17, abs=0.1)
    # exercise 9-11: 4096 steps make AF four times as costly again
    assert request_transfer("gqa", GQA, step, 4096, 25e9, 5e-6).af_s == pytest.approx(4 * g.af_s)


def test_bad_af_inputs():
    with pytest.raises(HarnessError, match="tokens must be a positive integer, got 0"):
        af_transfer(QWEN, 2.0, 25e9, 5e-6, tokens=0)
    with pytest.raises(HarnessError, match="bandwidth_bytes_per_s must be a positive"):
        af_transfer(QWEN, 2.0, 0.0, 5e-6)
    with pytest.raises(HarnessError, match="af_transfers must be an integer >= 2"):
        critical_startup_latency_s(GQA, 1.0, 1, 25e9)
    with pytest.raises(HarnessError, match="tokens=1"):
        request_transfer("gqa", GQA, af_transfer(QWEN, 2.0, 25e9, 5e-6, tokens=2), 10, 25e9, 5e-6)
