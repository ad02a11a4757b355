"""Keep, fetch or recompute (Chapter 9, §9.5.2)."""

import pytest

from harness.errors import HarnessError
from harness.model.kv import kv_bytes
from harness.model.kv_reuse import critical_bandwidth_bytes_per_s, keep_or_recompute, min_uses_to_keep, reuse_band, usage_modes
from harness.specs.models import get_model
from harness.units import GiB

V = kv_bytes(get_model("qwen3-8b"), 8192, 2)
V_MLA = kv_bytes(get_model("deepseek-v3"), 8192, 2)
RECOMPUTE_S = 0.8563738676512821  # prefill of 8192 tokens on A100 at 50 % (pinned in test_kv_tiers)
NIC = 25e9


def test_keep_beats_recompute_over_the_nic():
    # §9.5.2: write + read 48.3 + 48.3 = 96.6 ms < 856 ms, under one eighth
    d = keep_or_recompute(V / NIC, V / NIC, RECOMPUTE_S)
    assert d.keep_s == pytest.approx(96.6e-3, abs=0.1e-3)
    assert d.keep_wins and d.keep_s < d.recompute_total_s / 8
    assert d.min_uses_to_keep == 1


def test_critical_bandwidth_band():
    # §9.5.2: B* = r ≈ 1.41 GB/s for a fetch alone; k = 1 needs 2r ≈ 2.82 GB/s; between, k ≥ 2
    assert critical_bandwidth_bytes_per_s(V, RECOMPUTE_S) == pytest.approx(1.41e9, rel=2e-3)
    assert critical_bandwidth_bytes_per_s(V, RECOMPUTE_S, 1) == pytest.approx(2.82e9, rel=2e-3)
    for b in (1.5e9, 2.0e9, 2.5e9, 2.8e9):  # inside the band: one reuse never pays, some k ≥ 2 does
        assert not keep_or_recompute(V / b, V / b, RECOMPUTE_S, 1).keep_wins
        assert min_uses_to_keep(V / b, V / b, RECOMPUTE_S) >= 2
    assert keep_or_recompute(V / 2.5e9, V / 2.5e9, RECOMPUTE_S, 2).keep_wins  # 2.5 GB/s > r·3/2 ≈ 2.12 GB/s
    assert min_uses_to_keep(V / 2.5e9, V / 2.5e9, RECOMPUTE_S) == 2
    assert min_uses_to_keep(V / 2.9e9, V / 2.9e9, RECOMPUTE_S) == 1
    # closer to 1.41 GB/s needs more reuses; below it a read alone is slower than recompute
    assert min_uses_to_keep(V / 1.45e9, V / 1.45e9, RECOMPUTE_S) > 10
    assert min_uses_to_keep(V / 1.3e9, V / 1.3e9, RECOMPUTE_S) is None
    band = reuse_band(V, RECOMPUTE_S, 4)
    assert [x.uses for x in band] == [1, 2, 3, 4]
    assert band[0].critical_bandwidth_bytes_per_s > band[-1].critical_bandwidth_bytes_per_s


def test_slow_links_and_ssd():
    # §9.5.2: 10 GbE (1.25 GB/s) fetch ≈ 966 ms > recompute; SSD write 288 + read 170 = 458 ms < 856 ms
    d = keep_or_recompute(V / 1.25e9, V / 1.25e9, RECOMPUTE_S)
    assert d.read_s == pytest.approx(0.966, abs=0.5e-3)
    assert not d.keep_wins and d.min_uses_to_keep is None
    s = keep_or_recompute(V / 4.2e9, V / 7.1e9, RECOMPUTE_S)
    assert s.write_s == pytest.approx(0.288, abs=0.5e-3)
    assert s.read_s == pytest.approx(0.170, abs=0.5e-3)
    assert s.keep_s == pytest.approx(0.458, abs=0.5e-3) and s.keep_wins
    # MLA: write + read over the same NIC ≈ 46.1 ms
    assert 2 * V_MLA / NIC == pytest.approx(46.1e-3, abs=0.1e-3)


def test_usage_modes():
    # §9.5.2: 100 remote reads occupy the NIC 4.83 s; 121 GB/s to finish in 1 s (4.8×); MLA 2.30 s, 57.6 GB/s (2.3×)
    modes = {m.mode: m for m in usage_modes(V, 100, NIC, RECOMPUTE_S, deadline_s=1.0, resident_s=10.0)}
    rr = modes["remote-read-per-step"]
    assert rr.link_busy_s == pytest.approx(4.83, abs=0.005)
    assert rr.bandwidth_to_finish_bytes_per_s == pytest.approx(121e9, rel=3e-3)
    assert rr.link_oversubscription == pytest.approx(4.8, abs=0.05)
    assert modes["fetch-once-and-keep"].link_busy_s == pytest.approx(48.3e-3, abs=0.1e-3)
    assert modes["recompute-once-and-keep"].link_bytes == 0 and modes["recompute-once-and-keep"].compute_s == RECOMPUTE_S
    # §9.5.2/§9.1.3: 10 s resident is 11.25 GiB·s (GQA) vs 5.36 GiB·s (MLA)
    assert modes["fetch-once-and-keep"].resident_byte_seconds == pytest.approx(11.25 * GiB)
    mla = {m.mode: m for m in usage_modes(V_MLA, 100, NIC, RECOMPUTE_S, deadline_s=1.0, resident_s=10.0)}
    assert mla["remote-read-per-step"].link_busy_s == pytest.approx(2.30, abs=0.005)
    assert mla["remote-read-per-step"].bandwidth_to_finish_bytes_per_s == pytest.approx(57.6e9, rel=2e-3)
    assert mla["remote-read-per-step"].link_oversubscription == pytest.approx(2.3, abs=0.05)
    assert mla["fetch-once-and-keep"].resident_byte_seconds / GiB == pytest.approx(5.36, abs=0.005)


def test_validation():
    with pytest.raises(HarnessError, match="uses must be a positive integer"):
        keep_or_recompute(0.1, 0.1, 1.0, 0)
    with pytest.raises(HarnessError, match="recompute_s"):
        min_uses_to_keep(0.1, 0.1, -1.0)
    with pytest.raises(HarnessError, match="link_bytes_per_s"):
        usage_modes(V, 1, 0, 1.0)
