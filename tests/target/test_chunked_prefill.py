"""vLLM's and SGLang's schedulers in the twin: token budget, mixed vs separate prefill, admission limits, prefix cache."""

import pytest

from harness.target.chunked_prefill import ChunkedPrefillScheduler, ChunkedPrefillSettings, settings_from_sglang, settings_from_vllm
from harness.target.des import ArrivingRequest, simulate


class Linear:
    def prefill_time_s(self, prompt_tokens, cached_tokens=0):
        return 1e-4 * prompt_tokens

    def decode_step_time_s(self, batch, context_tokens):
        return 0.010


def run(reqs, **kw):
    s = ChunkedPrefillSettings(**{"engine": "vllm", "max_num_seqs": 8, "max_num_batched_tokens": 1000, "mixed": True, **kw})
    return simulate(lambda: ChunkedPrefillScheduler(s, Linear()), [ArrivingRequest(*r) for r in reqs])


def test_long_prompt_is_chunked_by_the_token_budget():
    r = run([(0.0, 2500, 1)])
    assert r.first_token_s[0] == pytest.approx(3 * 1e-4 * 1000 - 1e-4 * 500)  # chunks 1000, 1000, 500


def test_vllm_mixes_prefill_into_decode_steps():
    r = run([(0.0, 100, 20), (0.05, 100, 2)])
    # the second prompt shares a step with the first request's decode token: its step is max(decode, prefill of 101)
    assert r.first_token_s[1] - 0.05 <= 0.010 + 0.0102 + 1e-9
    assert r.finished_s[0] == pytest.approx(0.01 + 19 * 0.010, rel=0.05)


def test_sglang_runs_prefill_batches_alone():
    on = run([(0.0, 100, 20), (0.05, 100, 2)])
    off = run([(0.0, 100, 20), (0.05, 100, 2)], engine="sglang", mixed=False)
    # SGLang pauses decoding for the prefill batch: the first request finishes later than with vLLM's mixed steps
    assert off.finished_s[0] > on.finished_s[0]


def test_max_num_seqs_bounds_admission_and_kv_capacity_holds_requests():
    r = run([(0.0, 10, 5)] * 3, max_num_seqs=2)
    assert r.first_token_s[2] >= min(r.finished_s[:2]) - 1e-12
    r = run([(0.0, 100, 50)] * 2, kv_capacity_tokens=200.0)  # room for one request's KV at a time
    assert r.first_token_s[1] >= r.finished_s[0] - 1e-12


def test_prefix_cache_skips_cached_blocks():
    h = (7, 8)
    r = run([(0.0, 1100, 1, h), (1.0, 1100, 1, h)], max_num_batched_tokens=4096)
    assert r.first_token_s[1] - 1.0 == pytest.approx(1e-4 * (1100 - 1024))
    r = run([(0.0, 1100, 1, h), (1.0, 1100, 1, h)], max_num_batched_tokens=4096, prefix_caching=False)
    assert r.first_token_s[1] - 1.0 == pytest.approx(1e-4 * 1100)


def test_settings_from_configs_state_their_assumptions():
    class V:
        max_num_seqs = None
        max_num_batched_tokens = 2048
        enable_chunked_prefill = None
        enable_prefix_caching = True
        max_model_len = 16384

    s = settings_from_vllm(V)
    assert s.mixed and s.max_num_seqs == 256 and s.max_num_batched_tokens == 2048 and any("max_num_seqs" in a for a in s.assumptions)

    class G:
        max_running_requests = 32
        chunked_prefill_size = -1
        context_length = 8192
        disable_radix_cache = True

    g = settings_from_sglang(G)
    assert not g.mixed and g.max_num_batched_tokens == 8192 and not g.prefix_caching


class ContextLinear(Linear):
    def decode_step_time_s(self, batch, context_tokens):
        return 0.010 + 1e-6 * batch * context_tokens


@pytest.mark.parametrize("engine, mixed", [("vllm", True), ("sglang", False)])
def test_fast_forward_gives_the_same_instants_as_stepping(engine, mixed):
    import numpy as np

    rng = np.random.default_rng(3)
    reqs = [ArrivingRequest(float(t), int(i), int(o)) for t, i, o in
            zip(np.cumsum(rng.exponential(0.05, 60)), rng.integers(64, 800, 60), rng.integers(2, 120, 60))]
    base = dict(engine=engine, max_num_seqs=16, max_num_batched_tokens=512, mixed=mixed)
    slow = simulate(lambda: ChunkedPrefillScheduler(ChunkedPrefillSettings(**base), ContextLinear()), reqs)
    fast = simulate(lambda: ChunkedPrefillScheduler(ChunkedPrefillSettings(**base, fast_forward=True), ContextLinear()), reqs)
    assert fast.events < slow.events
    np.testing.assert_allclose(fast.first_token_s, slow.first_token_s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(fast.finished_s, slow.finished_s, rtol=0, atol=1e-9)


def test_on_demand_kv_preempts_the_newest_and_recomputes_it():
    holder = {}

    def make():
        s = ChunkedPrefillSettings("vllm", 8, 1000, True, kv_capacity_tokens=260.0, kv_policy="on-demand")
        holder["s"] = ChunkedPrefillScheduler(s, Linear())
        return holder["s"]

    r = simulate(make, [ArrivingRequest(0.0, 100, 100), ArrivingRequest(0.0, 100, 100)])
    # 200 prompt tokens fit; after 30 decode steps (2 tokens each) the 260 are full: the newer request is preempted,
    # its 130 tokens freed, and it is prefilled again (prompt + its 30 tokens) once the first has finished
    assert holder["s"].preemptions == 1
    assert r.output_tokens.tolist() == [100, 100]
    assert r.finished_s[1] > r.finished_s[0] + 0.5  # it waited for the first's remaining ~70 steps
