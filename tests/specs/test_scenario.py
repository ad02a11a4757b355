"""Scenario validation: every bad input names the field, the value and the fix."""

import tomllib

import pytest

from harness.errors import HarnessError
from harness.specs.scenario import load_scenario, parse_scenario
from tests.conftest import SCENARIOS


def base():
    return tomllib.loads((SCENARIOS / "ch9-hetero-pd.toml").read_text())


def err(data) -> str:
    with pytest.raises(HarnessError) as e:
        parse_scenario(data, "test.toml")
    return str(e.value)


def test_all_shipped_pd_scenarios_load():
    loaded = [load_scenario(p) for p in SCENARIOS.glob("ch9-*.toml") if 'kind = "' not in p.read_text()
              or 'kind = "pd-capacity"' in p.read_text()]
    assert len(loaded) >= 5


def test_unknown_gpu():
    d = base()
    d["pools"][0]["gpu"] = "h100"
    m = err(d)
    assert "pools[0].gpu" in m and "'h100'" in m and "h100-sxm" in m


def test_unknown_model():
    d = base()
    d["workload"]["model"] = "gpt-5"
    assert "workload.model" in err(d) and "qwen3-8b" in err(d)


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_negative_or_non_finite_rate(value):
    d = base()
    d["workload"]["arrival_rate_per_s"] = value
    m = err(d)
    assert "workload.arrival_rate_per_s" in m


def test_missing_field():
    d = base()
    del d["workload"]["input_tokens"]
    m = err(d)
    assert "workload.input_tokens: missing" in m


def test_count_not_integer():
    d = base()
    d["pools"][1]["count"] = 2.5
    m = err(d)
    assert "pools[1].count" in m and "2.5" in m


def test_efficiency_above_one_is_refused():
    d = base()
    d["efficiency"]["compute"] = 1.2
    assert "efficiency.compute" in err(d)


def test_unknown_field_is_refused():
    d = base()
    d["workload"]["input_tokenz"] = 5
    m = err(d)
    assert "workload.input_tokenz: unknown field" in m


def test_cached_prefix_must_leave_a_token():
    d = base()
    d["workload"]["cached_prefix_tokens"] = 8192
    assert "cached_prefix_tokens" in err(d)


def test_reference_allocation_beyond_pool():
    d = base()
    d["reference_allocations"][0]["prefill"]["a100-80gb-sxm"] = 9
    assert "pool has 4" in err(d)


def test_newer_schema_refused():
    d = base()
    d["schema_version"] = 99
    assert "upgrade the harness" in err(d)


def test_bad_toml_and_missing_file(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("name = ")
    with pytest.raises(HarnessError, match="not valid TOML"):
        load_scenario(p)
    with pytest.raises(HarnessError, match="does not exist"):
        load_scenario(tmp_path / "none.toml")
