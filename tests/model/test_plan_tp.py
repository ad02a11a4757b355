"""Tensor-parallel pools in the capacity plan: instances of `tp` cards, weights and KV split, the all-reduce."""

import pytest

from harness.errors import HarnessError
from harness.model.plan import plan
from harness.specs.scenario import load_scenario, parse_scenario

HF = "tests/data/hf/llama-3.1-70b.config.json"


def _scenario(tp, count=8, gpu="h100-sxm", model=HF, **extra):
    pool = {"gpu": gpu, "count": count, "tp": tp, **extra}
    return parse_scenario({"name": "l70", "workload": {"model": model, "input_tokens": 2048, "output_tokens": 512,
                                                       "decode_batch": 32, "arrival_rate_per_s": 1.0},
                           "pools": [pool]})


def test_llama70b_config_on_8_h100_plans_as_one_tp8_instance():
    p = plan(_scenario(8))
    fit = p.memory.per_gpu["h100-sxm"]
    # 70.6 B parameters in BF16 (131 GiB) do not fit one 80 GB card but fit eight together
    assert p.memory.weight_bytes / 2**30 == pytest.approx(131.4, abs=0.1)
    assert fit.tensor_parallel == 8 and fit.decode_fits and fit.prefill_fits and fit.planned_decode_batch == 32
    s = p.stage_rates["h100-sxm"]
    assert s.tensor_parallel == 8 and s.decode_step_allreduce_s > 0
    assert p.colocated.requests_per_s == pytest.approx(1 / s.colocated_s_per_request)  # one instance
    assert p.pd is None  # one instance: nothing to split into P and D
    assert not p.warnings


def test_tp1_of_the_same_model_does_not_fit_and_says_so():
    p = plan(_scenario(1))
    assert p.memory.per_gpu["h100-sxm"].max_decode_batch == 0
    assert any("decode does not fit" in w and "give the pool a larger tp" in w for w in p.warnings)


def test_tp_splits_the_stage_and_adds_the_allreduce():
    one, four = plan(_scenario(4)).stage_rates["h100-sxm"], plan(_scenario(8)).stage_rates["h100-sxm"]
    # twice the cards per instance: the per-card roofline halves, the all-reduce grows
    roof4 = four.decode_step_s - four.decode_step_allreduce_s
    roof8 = one.decode_step_s - one.decode_step_allreduce_s
    assert roof4 == pytest.approx(roof8 / 2, rel=0.02)
    assert four.decode_step_allreduce_s > one.decode_step_allreduce_s > 0


def test_pd_over_instances_reports_cards():
    p = plan(_scenario(4))  # two TP4 instances
    assert p.pd is not None
    b = p.pd.best
    assert b.prefill["h100-sxm"] + b.decode["h100-sxm"] == 8 and b.prefill["h100-sxm"] % 4 == 0


@pytest.mark.parametrize("edit, match", [
    (dict(tp=3, count=9), r"pools\[0\]\.tp = 3 does not divide the 64 attention heads"),
    (dict(tp=8, count=12), "12 cards do not form whole TP8 instances; give a multiple of 8"),
])
def test_bad_tp_is_refused_with_the_field(edit, match):
    with pytest.raises(HarnessError, match=match):
        _scenario(**{"tp": 1, **edit})


def test_the_chapter_scenarios_load_by_the_names_model_list_prints():
    assert load_scenario("ch9-hetero-pd").name == "ch9-hetero-pd"
    assert load_scenario("ch9-hetero-pd.toml").name == "ch9-hetero-pd"
    with pytest.raises(HarnessError, match="does not exist"):
        load_scenario("ch9-no-such")


# ---- expert parallelism (`ep`) in MoE pools

MOE = "qwen3-235b-a22b"  # 128 routed experts, 64 query and 4 KV heads


def test_ep_spreads_the_experts_over_the_instance_and_keeps_the_first_order_stage():
    tp8 = plan(_scenario(8, gpu="h200-sxm", model=MOE))
    ep8 = plan(_scenario(8, gpu="h200-sxm", model=MOE, ep=8))
    fit = ep8.memory.per_gpu["h200-sxm"]
    assert fit.tensor_parallel == 8 and fit.expert_parallel == 8 and tp8.memory.per_gpu["h200-sxm"].expert_parallel is None
    # per card the same expert weight bytes and FLOPs (whole experts on 1/ep of the cards or 1/tp of every expert):
    # at the first order (§9.2.3) the stage and the memory fit do not change; routing skew is §9.4.1's (ep-skew)
    a, b = tp8.stage_rates["h200-sxm"], ep8.stage_rates["h200-sxm"]
    assert (b.decode_step_s, b.prefill_s_per_request) == (a.decode_step_s, a.prefill_s_per_request)
    assert fit.max_decode_batch == tp8.memory.per_gpu["h200-sxm"].max_decode_batch


@pytest.mark.parametrize("edit, match", [
    (dict(tp=8, ep=3), r"ep = 3 does not divide tp = 8: .*give ep = one of 1, 2, 4, 8"),
    (dict(tp=8, ep=16, count=16), r"ep = 16 does not divide tp = 8"),
    (dict(tp=8, ep=8, model=HF), r"pools\[0\]\.ep = 8: llama-3.1-70b.* is a dense model \(no experts to spread\); give ep = 1"),
    (dict(tp=2, ep=2, count=2, model="deepseek-v3", gpu="h200-sxm", experts=True), None),
    (dict(tp=8, pp=2, count=16), r"pp = 2: pipeline parallelism is not planned by the capacity model.*give pp = 1"),
])
def test_bad_ep_or_pp_is_refused_with_the_field_and_the_fix(edit, match):
    edit = dict(edit)
    if edit.pop("experts", False):  # a valid ep on a MoE model (256 experts) loads
        assert _scenario(**edit).pools[0].ep == 2
        return
    with pytest.raises(HarnessError, match=match):
        _scenario(**edit)


def test_ep_that_does_not_divide_the_experts_is_refused():
    from harness.specs.models import get_model
    from harness.specs.scenario import expert_parallel_problem

    m = get_model(MOE)
    assert expert_parallel_problem(m, 8, 0) is None
    assert "pools[1].ep = 3 does not divide the 128 routed experts of qwen3-235b-a22b; give ep = one of 2, 4, 8" in \
        expert_parallel_problem(m, 3, 1)
