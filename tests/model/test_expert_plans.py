"""The §9.3–9.4 calculators return typed record trees; their as_json is what `--json` prints."""

import pytest

from harness.model.expert_plan_records import AfPlan, EpSkewPlan, ExpertsPlan, ReplicasPlan
from harness.model.expert_plans import af_plan, ep_skew_plan, experts_plan, replicas_plan
from harness.specs.scenario_experts import (
    AfSplitScenario,
    EpSkewScenario,
    ExpertReplicasScenario,
    ExpertsCpuGpuScenario,
    load_expert_scenario,
)
from tests.conftest import SCENARIOS


def _load(name, cls):
    return load_expert_scenario(str(SCENARIOS / f"{name}.toml"), cls)


def test_experts_plan_record():
    p = experts_plan(_load("ch9-ex9.3-cpu-gpu-experts", ExpertsCpuGpuScenario))
    assert isinstance(p, ExpertsPlan)
    assert p.expert.weight_bytes == pytest.approx(36 * 2**20, rel=0.01)  # §9.3.2: W_e = 36 MiB (Qwen3-235B-A22B, BF16)
    assert p.to_dict()["expert"]["flops_per_token"] == p.expert.flops_per_token


def test_af_ep_skew_and_replicas_plan_records():
    af = af_plan(_load("ch9-ex9.4-af", AfSplitScenario))
    assert isinstance(af, AfPlan) and af.per_bandwidth[0].decode_step.transfers > 0
    ep = ep_skew_plan(_load("ch9-ex9.5-ep-skew", EpSkewScenario), batches=5)
    assert isinstance(ep, EpSkewPlan) and ep.exchange.cases[0].dispatch.bound_s > 0
    rp = replicas_plan(_load("ch9-ex9.6-replicas", ExpertReplicasScenario))
    assert isinstance(rp, ReplicasPlan)
    assert rp.plan.saving_per_batch_s == pytest.approx(0.240e-3, abs=0.005e-3)  # example 9.6: ≈0.240 ms per batch
