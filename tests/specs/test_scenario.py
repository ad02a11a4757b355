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


@pytest.mark.parametrize("field, value, needle", [
    ("input_tokens", 2**63 - 1, "workload: input_tokens = 9223372036854775807 tokens is above 10485760 tokens, the longest context"),
    ("output_tokens", 10**20, "output_tokens = 100000000000000000000 tokens is above 10485760"),
    ("decode_batch", 10**11, "decode_batch 100000000000 × "),
])
def test_impossible_counts_are_refused_naming_the_bound(field, value, needle):
    d = base()
    d["workload"][field] = value
    assert needle in err(d)


@pytest.mark.parametrize("kind", ["[1]", "{ a = 1 }", "3"])
def test_non_string_kind_is_refused_by_every_loader(tmp_path, kind):
    from harness.specs.scenario import load_any_scenario
    from harness.specs.scenario_experts import ExpertsCpuGpuScenario, load_expert_scenario
    from harness.specs.scenario_kv import load_kind

    p = tmp_path / "k.toml"
    p.write_text(f'kind = {kind}\nname = "x"\n')
    for load in (load_any_scenario, load_scenario, lambda q: load_expert_scenario(q, ExpertsCpuGpuScenario),
                 lambda q: load_kind(q, "kv-tiers")):
        with pytest.raises(HarnessError, match="kind must be a string, one of pd-capacity"):
            load(p)


def test_versions_below_one_are_refused():
    d = base()
    d["schema_version"] = 0
    assert "schema_version must be an integer >= 1, got 0" in err(d)
