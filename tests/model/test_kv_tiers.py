"""KV tiers: fetch, production rate, retention, capacity for an interval, SSD budget (Chapter 9, §9.5.2)."""

import math

import pytest

from harness.errors import HarnessError
from harness.model.forward import param_counts
from harness.model.kv import kv_bytes, kv_bytes_per_token
from harness.model.kv_tiers import (
    blocks_bytes,
    capacity_for_interval_bytes,
    interval_capacity,
    kv_production_rate_bytes_per_s,
    prefixes_that_fit,
    retention_s,
    serial_fetch_time_s,
    ssd_write_budget,
    tier_fetches,
)
from harness.model.stages import Workload, stage_rates
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model
from harness.specs.storage import SECONDS_PER_DAY, get_server, get_ssd, per_gpu_tiers

Q8 = get_model("qwen3-8b")
V = kv_bytes(Q8, 8192, 2)  # 1.125 GiB
RECOMPUTE_S = stage_rates(get_gpu("a100-80gb-sxm"), Q8, Workload(8192, 1025)).prefill_s_per_request
R = kv_production_rate_bytes_per_s(V, RECOMPUTE_S)
TIERS = per_gpu_tiers(get_server("dgx-a100"), param_counts(Q8).total * 2)
SSD = get_ssd("solidigm-d7-p5520-3.84tb")


def test_fetch_per_tier_vs_recompute():
    # Fig. 9-29: 0 / 48.3 / 170 / 96.6 ms vs 856 ms recompute (tolerance 0.1 ms, the chapter's rounding)
    f = {x.tier: x for x in tier_fetches(TIERS, V, RECOMPUTE_S, R)}
    assert f["hbm"].fetch_s == 0
    assert f["host"].fetch_s == pytest.approx(48.3e-3, abs=0.1e-3)
    assert f["ssd"].fetch_s == pytest.approx(170e-3, abs=0.5e-3)
    assert f["remote"].fetch_s == pytest.approx(96.6e-3, abs=0.1e-3)
    assert RECOMPUTE_S == pytest.approx(0.856, abs=0.5e-3)
    assert all(x.faster_than_recompute for x in f.values())
    assert f["host"].prefixes_that_fit == 227  # §9.5.2: 256 GiB stages ≈227 prefixes of 8K
    assert f["remote"].prefixes_that_fit is None and math.isinf(f["remote"].retention_s)


def test_production_rate_and_retention():
    # §9.5.2: r ≈ 1.41 GB/s; retention HBM ≈45 s, host ≈195 s, SSD ≈2722 s (45 min)
    assert R == pytest.approx(1.41e9, rel=2e-3)
    ret = {t.name: retention_s(t.capacity_bytes, R) for t in TIERS if not math.isinf(t.capacity_bytes)}
    assert ret["hbm"] == pytest.approx(45, abs=0.5)
    assert ret["host"] == pytest.approx(195, abs=0.5)
    assert ret["ssd"] == pytest.approx(2722, abs=1)


def test_capacity_for_reuse_interval():
    # §9.5.2: C ≥ rT -> 14.1 GB for 10 s (fits HBM), 846 GB for 10 min (needs SSD beyond 275 GB host)
    assert capacity_for_interval_bytes(R, 10) == pytest.approx(14.1e9, rel=2e-3)
    assert capacity_for_interval_bytes(R, 600) == pytest.approx(846e9, rel=1e-3)
    assert interval_capacity(TIERS, R, 10).tiers_needed == ("hbm",)
    assert interval_capacity(TIERS, R, 600).tiers_needed == ("hbm", "host", "ssd")
    assert interval_capacity(TIERS[:2], R, 600).tiers_needed == ()  # HBM + host cannot hold it


def test_mooncake_blocks():
    # §9.5.2: 50 000 blocks of 512 tokens of Qwen3-8B ≈ 3.77 TB
    assert blocks_bytes(50_000, 512, kv_bytes_per_token(Q8, 2)) == pytest.approx(3.77e12, rel=2e-3)


def test_ssd_write_budget():
    # §9.5.2: 44.4 MB/s budget, all new KV overruns it 31.7×, ≈3.2 % admissible; 5.6 % of PCIe, 34 % of SSD write;
    # the 5-year rating would last under two months; at the budget the SSD holds one day of KV
    b = ssd_write_budget(SSD, R, 0.0, 25e9)
    assert b.endurance_write_bytes_per_s == pytest.approx(44.4e6, abs=0.05e6)
    assert b.overrun_factor == pytest.approx(31.7, abs=0.05)
    assert b.admissible_fraction == pytest.approx(0.032, abs=0.0005)
    assert b.host_link_share == pytest.approx(0.056, abs=0.0005)
    assert b.ssd_write_bandwidth_share == pytest.approx(0.34, abs=0.005)
    assert b.life_at_full_rate_s < 61 * SECONDS_PER_DAY
    assert b.window_at_budget_s == pytest.approx(SECONDS_PER_DAY)
    # exercise 9-8: a 50 % prefix hit halves new KV, doubling the admissible share
    assert ssd_write_budget(SSD, R, 0.5).admissible_fraction == pytest.approx(2 * b.admissible_fraction)


def test_serial_fetch_and_validation():
    assert serial_fetch_time_s(25e9, [25e9, 25e9], 0.01) == pytest.approx(2.01)
    assert prefixes_that_fit(10, 3) == 3
    with pytest.raises(HarnessError, match="hop bandwidth_bytes_per_s"):
        serial_fetch_time_s(1, [0])
    with pytest.raises(HarnessError, match="prefix_hit_rate"):
        ssd_write_budget(SSD, R, 1.0)
    with pytest.raises(HarnessError, match="prefill_s"):
        kv_production_rate_bytes_per_s(V, 0)
