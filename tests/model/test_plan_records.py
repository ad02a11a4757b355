"""The plan's record tree at its edges: as_json (metadata-driven) and StoredPlan, the typed read-back of plan.json."""

import json
import math
from dataclasses import dataclass

import pytest

from harness.errors import HarnessError
from harness.model.plan import plan
from harness.model.plan_records import StoredPlan
from harness.model.record import as_json, flatten, hidden, omit_none
from harness.specs.scenario import load_scenario
from tests.conftest import SCENARIOS


@dataclass(frozen=True, slots=True)
class _Inner:
    a_s: float
    b_bytes: float


@dataclass(frozen=True, slots=True)
class _Outer:
    key: str = hidden()
    inner: _Inner = flatten()
    rate_per_s: float = math.inf
    note: str | None = omit_none()
    items: tuple[_Inner, ...] = ()


def test_as_json_follows_the_field_metadata():
    out = as_json(_Outer("k", _Inner(1.0, 2.0), items=(_Inner(3.0, 4.0),)))
    assert out == {"a_s": 1.0, "b_bytes": 2.0, "rate_per_s": None, "items": [{"a_s": 3.0, "b_bytes": 4.0}]}
    assert as_json(_Outer("k", _Inner(1.0, 2.0), note="x"))["note"] == "x"
    with pytest.raises(TypeError, match="no JSON form"):
        as_json(object())


def test_stored_plan_reads_back_what_the_plan_wrote():
    p = plan(load_scenario(SCENARIOS / "ch9-hetero-pd.toml"), include_grid=False)
    back = StoredPlan.from_json(json.loads(json.dumps(p.to_dict())))
    assert back.pd_best == p.pd.best  # the null link rate comes back as inf
    assert back.workload == p.workload and back.kv == p.kv and back.startup == p.startup
    assert back.drain["pd"] == p.drain["pd"]
    assert back.prefill_s_per_request["a100-80gb-sxm"] == p.stage_rates["a100-80gb-sxm"].prefill_s_per_request


def test_stored_plan_refuses_what_is_not_a_plan():
    with pytest.raises(HarnessError, match="no stage_rates"):
        StoredPlan.from_json({"scenario": "x"})
    d = plan(load_scenario(SCENARIOS / "ch9-hetero-pd.toml"), include_grid=False).to_dict()
    del d["kv"]["transfer_s"]
    with pytest.raises(HarnessError, match="kv lacks transfer_s"):
        StoredPlan.from_json(d)
