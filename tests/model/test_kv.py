"""KV state size and transfer (Chapter 9, §9.1.3, §9.2.2, example 9.1)."""

import pytest

from harness.model.kv import (
    double_buffer_memory,
    kv_byte_seconds,
    kv_bytes,
    kv_bytes_per_token,
    link_backlog_growth_bytes_per_s,
    link_demand_bytes_per_s,
    transfer_time_s,
    transfers_per_s,
)
from harness.specs.models import get_model
from harness.units import GiB, KiB, MiB

Q8 = get_model("qwen3-8b")
DS = get_model("deepseek-v3")


def test_gqa_and_mla_bytes_per_token():
    # §9.2.2: 144 KiB per token (GQA), 61·576·2 = 70,272 bytes ≈ 68.6 KiB (MLA)
    assert kv_bytes_per_token(Q8, 2) == 144 * KiB
    assert kv_bytes_per_token(DS, 2) == 70_272
    assert kv_bytes_per_token(DS, 2) / KiB == pytest.approx(68.6, abs=0.05)


def test_section_9_2_2_table():
    # §9.2.2 table: 1.125 GiB / 549 MiB for 8192 tokens; 48.3 / 24.2 ms and 23.0 / 11.5 ms
    v_gqa = kv_bytes(Q8, 8192, 2)
    v_mla = kv_bytes(DS, 8192, 2)
    assert v_gqa == 1.125 * GiB == 1_207_959_552  # footnote 3: exact payload
    assert v_mla == 575_668_224  # footnote 6
    assert v_mla / MiB == pytest.approx(549, abs=0.5)
    assert transfer_time_s(v_gqa, 25e9) * 1e3 == pytest.approx(48.31838208, abs=1e-8)  # footnote 3
    assert transfer_time_s(v_gqa, 25e9, 5e-6) * 1e3 == pytest.approx(48.32338208, abs=1e-8)
    assert transfer_time_s(v_gqa, 50e9) * 1e3 == pytest.approx(24.2, abs=0.05)
    assert transfer_time_s(v_mla, 25e9) * 1e3 == pytest.approx(23.02672896, abs=1e-8)  # footnote 6
    assert transfer_time_s(v_mla, 50e9) * 1e3 == pytest.approx(11.5, abs=0.05)


def test_link_demand_and_backlog():
    # §9.2.2: 8/s -> 9.7 GB/s, 16/s -> 19.3 GB/s; on 100 GbE 96.6 ms per state and 6.8 GB/s pile-up
    v = kv_bytes(Q8, 8192, 2)
    assert link_demand_bytes_per_s(8, v) / 1e9 == pytest.approx(9.7, abs=0.05)
    assert link_demand_bytes_per_s(16, v) / 1e9 == pytest.approx(19.3, abs=0.05)
    assert transfer_time_s(v, 12.5e9) * 1e3 == pytest.approx(96.6, abs=0.05)
    assert link_backlog_growth_bytes_per_s(16, v, 12.5e9) / 1e9 == pytest.approx(6.8, abs=0.05)
    assert link_backlog_growth_bytes_per_s(8, v, 12.5e9) == 0
    # MLA: 4.6 and 9.2 GB/s, 46.1 ms on 100 GbE
    vm = kv_bytes(DS, 8192, 2)
    assert link_demand_bytes_per_s(8, vm) / 1e9 == pytest.approx(4.6, abs=0.05)
    assert link_demand_bytes_per_s(16, vm) / 1e9 == pytest.approx(9.2, abs=0.05)
    assert transfer_time_s(vm, 12.5e9) * 1e3 == pytest.approx(46.1, abs=0.05)


def test_link_term_of_mu_pd():
    # example 9.2: ≈20.7 states/s on 25 GB/s; MLA 43.4 (50 GB/s: 41.4 GQA, 86.9 MLA)
    assert transfers_per_s(kv_bytes(Q8, 8192, 2), 25e9) == pytest.approx(20.7, abs=0.05)
    assert transfers_per_s(kv_bytes(DS, 8192, 2), 25e9) == pytest.approx(43.4, abs=0.05)
    assert transfers_per_s(kv_bytes(Q8, 8192, 2), 50e9) == pytest.approx(41.4, abs=0.05)
    assert transfers_per_s(kv_bytes(DS, 8192, 2), 50e9) == pytest.approx(86.9, abs=0.05)


def test_residency_and_double_buffer():
    # §9.1.3: 1.125 GiB parked for a 10 s tool call -> 11.25 GiB·s; Fig. 9-6: 2.25 GiB in flight
    v = kv_bytes(Q8, 8192, 2)
    assert kv_byte_seconds(v, 10) / GiB == pytest.approx(11.25)
    assert double_buffer_memory(v).total_bytes / GiB == pytest.approx(2.25)
    assert double_buffer_memory(kv_bytes(DS, 8192, 2)).total_bytes / GiB == pytest.approx(1.07, abs=0.005)


def test_bad_bandwidth_is_refused():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="bandwidth"):
        transfer_time_s(1.0, 0.0)
