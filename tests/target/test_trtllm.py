"""TensorRT-LLM's scheduler in the twin, on hand-worked cases: the token budget, whole vs chunked contexts, the
capacity policies (GUARANTEED_NO_EVICT reserves, MAX_UTILIZATION evicts), refusals."""

import pytest

from harness.errors import HarnessError
from harness.target.des import ArrivingRequest, simulate
from harness.target.trtllm import TrtllmScheduler, TrtllmSettings


class Linear:
    """Prefill 0.1 ms a token; a decode step 10 ms (a mixed step: max of the two, the twin's default)."""

    def __init__(self):
        self.prefills = []

    def prefill_time_s(self, prompt_tokens, cached_tokens=0):
        self.prefills.append(prompt_tokens)
        return 1e-4 * prompt_tokens

    def decode_step_time_s(self, batch, context_tokens):
        return 0.010


def run(reqs, src=None, **kw):
    s = TrtllmSettings(**{"max_batch_size": 8, "max_num_tokens": 1000, **kw})
    src = src or Linear()
    return simulate(lambda: TrtllmScheduler(s, src), [ArrivingRequest(*r) for r in reqs])


def test_a_whole_context_waits_for_an_iteration_with_room():
    r = run([(0.0, 600, 3), (0.0, 600, 3)])
    # it1: prompt 0 (600 of 1000 tokens); prompt 1 does not fit the 400 left and chunking is off -> waits
    # it2: request 0's decode token + prompt 1 (601 tokens: max(10 ms, 60.1 ms)); it3: two decode tokens; it4: one
    assert r.first_token_s.tolist() == pytest.approx([0.060, 0.1201])
    assert r.finished_s.tolist() == pytest.approx([0.1301, 0.1401])


def test_chunked_context_cuts_prompts_in_whole_kv_blocks():
    src = Linear()
    r = run([(0.0, 2500, 1)], src, enable_chunked_context=True, tokens_per_block=32)
    assert src.prefills == [992, 992, 516]  # 1000 // 32 · 32 = 992, twice, then the rest
    assert r.first_token_s[0] == pytest.approx(0.25)


def test_a_prompt_longer_than_the_budget_is_refused_without_chunking():
    r = run([(0.0, 1500, 4)])
    assert r.rejected == 1 and r.first_token_s.tolist() != r.first_token_s.tolist()  # NaN: no token


def test_guaranteed_no_evict_reserves_the_whole_sequence():
    r = run([(0.0, 100, 50), (0.0, 100, 50)], kv_capacity_tokens=200.0)  # 150 tokens each: one at a time
    assert r.first_token_s[1] >= r.finished_s[0] - 1e-12


def test_max_utilization_admits_both_and_evicts_the_newest_when_full():
    reqs = [(0.0, 100, 100), (0.0, 100, 100)]
    sched = {}

    def make():
        sched["s"] = TrtllmScheduler(TrtllmSettings(8, 1000, capacity_policy="MAX_UTILIZATION", kv_capacity_tokens=230.0), Linear())
        return sched["s"]

    r = simulate(make, [ArrivingRequest(*x) for x in reqs])
    assert sched["s"].preemptions >= 1
    assert r.first_token_s[1] < r.finished_s[0]  # both ran at first
    assert r.finished_s[1] > r.finished_s[0] and r.output_tokens.tolist() == [100, 100]


def test_bad_settings_name_the_field():
    with pytest.raises(HarnessError, match="capacity_policy"):
        TrtllmSettings(capacity_policy="FIRST_COME")
    with pytest.raises(HarnessError, match="max_num_tokens"):
        TrtllmSettings(max_num_tokens=0)


def test_the_twin_spec_builds_and_reloads_a_trtllm_twin(tmp_path):
    from harness.specs.models import get_model
    from harness.target.step_times import RooflineStepTimes
    from harness.target.twin import TwinSpec, load_twin, save_twin

    spec = TwinSpec("trtllm", TrtllmSettings(16, 4096), RooflineStepTimes(get_model("qwen3-8b"), 1e14, 1e12), "qwen3-8b", "test")
    assert isinstance(spec.make_scheduler(), TrtllmScheduler) and spec.slots == 16
    back = load_twin(save_twin(spec, tmp_path / "twin.json"))
    assert back.engine == "trtllm" and back.settings == spec.settings
