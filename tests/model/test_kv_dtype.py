"""The chapter-9 plan per KV dtype (Chapter 19, §19.6): bf16 reproduces Chapter 9's numbers, lower dtypes scale them."""

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.model.kv_dtype import KV_DTYPES, kv_dtype_row, kv_dtype_table, max_decode_batch, mixed_precision_state_bytes, state_bytes
from harness.specs.scenario import load_scenario
from harness.units import GiB, KiB

A100, H20 = "a100-80gb-sxm", "h20-96gb"


SCENARIO = Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "ch9-hetero-pd.toml"


@pytest.fixture(scope="module")
def table():
    return {r.kv_dtype: r for r in kv_dtype_table(load_scenario(SCENARIO))}


def test_bf16_row_is_chapter_9(table):
    r = table["bf16"]
    # §9.2.2: 144 KiB per token, 1.125 GiB for 8192 tokens (exact)
    assert r.kv_bytes_per_token == 144 * KiB and r.state_bytes == pytest.approx(1.125 * GiB)
    # example 9.2: link term ≈20.7 req/s at 25 GB/s, μ_PD ≈4.55 (D-bound, 4 A100 in P)
    assert r.link_requests_per_s == pytest.approx(20.7, abs=0.05)
    assert r.pd_requests_per_s == pytest.approx(4.55, abs=0.01) and r.pd_bound == "decode"
    assert r.pd_prefill == {A100: 4, H20: 0}
    # §9.2.3: decode step 55.1 ms on A100, 27.4 ms on H20; ≈490 and ≈85 prefill tokens hidden per step
    assert r.decode_step_s[A100] == pytest.approx(55.1e-3, abs=0.05e-3)
    assert r.decode_step_s[H20] == pytest.approx(27.4e-3, abs=0.05e-3)
    assert r.hidden_prefill_tokens_per_decode_step[A100] == pytest.approx(490, rel=0.01)
    assert r.hidden_prefill_tokens_per_decode_step[H20] == pytest.approx(85, rel=0.01)
    # §9.5.2: r ≈1.41 GB/s; retention HBM ≈45 s, host ≈195 s, SSD ≈2722 s (1 % tolerance, the chapter's rounding)
    assert r.kv_production_bytes_per_s == pytest.approx(1.41e9, rel=0.01)
    assert r.retention_s["hbm"] == pytest.approx(45, rel=0.01)
    assert r.retention_s["host"] == pytest.approx(195, rel=0.01)
    assert r.retention_s["ssd"] == pytest.approx(2722, rel=0.01)
    assert r.retention_s["remote"] is None
    # §9.2.3 footnote: batch 32 at 8704 mean context fits (59.9 GB); the largest batch is above 32 on both cards
    assert r.max_decode_batch[A100] >= 32 and r.max_decode_batch[H20] >= 32


def test_fp8_halves_state_and_doubles_link_and_retention(table):
    b, f = table["bf16"], table["fp8"]
    assert f.kv_bytes_per_token == b.kv_bytes_per_token / 2
    # a state half the size: the link term doubles (≈41.4/s, the value §9.2.3 gives for twice the bandwidth)
    assert f.link_requests_per_s == pytest.approx(41.4, abs=0.05)
    for tier in ("hbm", "host", "ssd"):
        assert f.retention_s[tier] == pytest.approx(2 * b.retention_s[tier], rel=1e-9)
    # decode step: weights 15.1 GB + KV 41.1/2 GB over 1020 GB/s ≈ 35.0 ms on A100
    assert f.decode_step_s[A100] == pytest.approx((15.1e9 + 41.1e9 / 2) / 1020e9, rel=0.01)
    # the D pool gets faster, so the plan changes: PD turns prefill-bound and takes one H20 into P
    assert f.pd_requests_per_s > b.pd_requests_per_s and f.pd_bound == "prefill"
    assert f.pd_prefill == {A100: 4, H20: 1}
    assert f.pd_requests_per_s == pytest.approx(4 / 0.856 + 1 / 1.805, rel=0.01)
    # a faster memory-bound step leaves less idle compute: fewer prefill tokens hide in it
    assert f.hidden_prefill_tokens_per_decode_step[A100] < b.hidden_prefill_tokens_per_decode_step[A100]


def test_int8_equals_fp8_and_int4_halves_int8(table):
    # Chapter 19, §19.6: INT4 instead of INT8 cuts the KV memory by 50 %
    assert table["int8"].to_dict() | {"kv_dtype": "fp8"} == table["fp8"].to_dict()
    assert table["int4"].state_bytes == table["int8"].state_bytes / 2
    assert table["int4"].max_decode_batch[A100] >= 2 * table["int8"].max_decode_batch[A100]
    # prefill does not depend on the KV dtype: once PD is prefill-bound, int4 gains nothing over int8
    assert table["int4"].pd_requests_per_s == pytest.approx(table["int8"].pd_requests_per_s)


def test_every_dtype_row_and_dict(table):
    assert list(table) == list(KV_DTYPES)
    for r in table.values():
        d = r.to_dict()
        assert d["kv_dtype"] == r.kv_dtype and d["state_bytes"] > 0


def test_unknown_dtype_names_field():
    s = load_scenario(SCENARIO)
    with pytest.raises(HarnessError, match="kv_dtype: unknown dtype 'fp4'.*Known"):
        kv_dtype_row(s, "fp4")
    with pytest.raises(HarnessError, match="at least one"):
        kv_dtype_table(s, [])


def test_residual_full_precision_policy():
    # §19.6: newest 128 tokens in bf16, the rest in int4: 128 full tokens + 8064 at a quarter
    full = state_bytes("qwen3-8b", 1, "bf16")
    v = mixed_precision_state_bytes(full, 8192, 128, 0.5, 2.0)
    assert v == pytest.approx(128 * full + 8064 * full / 4)
    assert mixed_precision_state_bytes(full, 100, 128, 0.5, 2.0) == pytest.approx(100 * full)
    with pytest.raises(HarnessError):
        mixed_precision_state_bytes(full, -1, 128, 0.5, 2.0)


def test_max_decode_batch():
    assert max_decode_batch(80e9, 16.4e9, 1.2e9) == 53
    assert max_decode_batch(10e9, 16.4e9, 1.2e9) == 0
    with pytest.raises(HarnessError):
        max_decode_batch(80e9, 1e9, 0)
