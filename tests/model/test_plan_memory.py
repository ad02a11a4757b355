"""A deployment that does not fit in HBM gets no capacity it cannot have (issue 18): the largest decode batch
that fits, or capacity 0 with the reason, in the record, the JSON and the text."""

import json

import pytest

from harness.cli import main
from harness.report.plans.plan import render_text
from harness.model.plan import plan
from harness.specs.scenario import load_scenario
from tests.conftest import SCENARIOS, scenario_variant

GIB = 2**30


_variant = scenario_variant


def test_decode_batch_64_is_planned_at_the_largest_batch_that_fits(tmp_path):
    # issue 18: decode batch 64 on H20 needs 97.4 GiB of 89.4 GiB (weights 15.3 + 64 × 1.27 + 1.125)
    p = plan(load_scenario(_variant(tmp_path, "b64", ("decode_batch = 32", "decode_batch = 64"))), include_grid=False)
    h20 = p.memory.per_gpu["h20-96gb"]
    assert p.memory.decode_side_bytes / GIB == pytest.approx(97.4, abs=0.05)
    assert not h20.decode_fits and h20.prefill_fits
    # ⌊(89.4 − 15.3 − 1.125) GiB / 1.266 GiB⌋ = 57 requests
    assert h20.max_decode_batch == 57 and h20.planned_decode_batch == 57
    assert "97.4 GiB of 89.4 GiB" in h20.note and "largest batch that fits, 57" in h20.note
    assert p.stage_rates["h20-96gb"].decode_step.batch == 57
    assert p.memory.per_gpu["a100-80gb-sxm"].planned_decode_batch == 45
    assert any("h20-96gb: decode batch 64" in w for w in p.warnings)
    # the capacity is that of the batches that fit, not of batch 64
    at_fit = plan(load_scenario(_variant(tmp_path, "b57", ("decode_batch = 32", "decode_batch = 57"))), include_grid=False)
    assert p.stage_rates["h20-96gb"].decode_s_per_request == at_fit.stage_rates["h20-96gb"].decode_s_per_request
    assert "WARNING h20-96gb: decode batch 64 needs 97.4 GiB of 89.4 GiB HBM" in render_text(p)


def test_weights_larger_than_hbm_get_capacity_zero_with_the_reason(tmp_path, capsys):
    # issue 18: DeepSeek-V3 in bf16 is ≈1250 GiB of weights per card; it reported 0.36 req/s
    path = _variant(tmp_path, "dsv3", ('model = "qwen3-8b"', 'model = "deepseek-v3"'), ('compare_states = ["deepseek-v3"]\n', ""))
    p = plan(load_scenario(path), include_grid=False)
    assert p.memory.weight_bytes / GIB == pytest.approx(1250, rel=0.01)
    assert p.colocated.requests_per_s == 0 and p.chunked_colocated.requests_per_s == 0
    assert p.pd is None
    for fit in p.memory.per_gpu.values():
        assert fit.max_decode_batch == 0 and not fit.prefill_fits
        assert "decode capacity 0" in fit.note and "prefill capacity 0" in fit.note
    assert any(w.startswith("PD capacity 0") for w in p.warnings)
    assert main(["model", "plan", path, "--json", "--no-grid"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["pd"] is None and r["colocated"]["requests_per_s"] == 0 and len(r["warnings"]) == 3
    assert main(["model", "plan", path]) == 0
    out = capsys.readouterr().out
    assert "WARNING PD capacity 0" in out and "PD best                   0.00" in out


def test_scenarios_that_fit_carry_no_warning():
    p = plan(load_scenario(SCENARIOS / "ch9-hetero-pd.toml"), include_grid=False)
    assert p.warnings is None and "warnings" not in p.to_dict()
    assert all(f.note is None and f.planned_decode_batch == 32 for f in p.memory.per_gpu.values())
