"""llama-server's scheduler in the twin: slot assignment, -b/-ub batching, split rules, SWA checkpoint breaks,
continuous batching off, context limits; checked on exact simulated instants with known step times."""

import pytest

from harness.errors import HarnessError
from harness.target.des import ArrivingRequest, simulate
from harness.target.llama_server import (
    LlamaServerScheduler, LlamaServerSettings, UBatch, settings_from_engine, split_ubatches, ubatch_time_s,
)


class Linear:
    """Known step times: prefill 1 ms per new token (+0.1 ms per cached), decode step 10 ms + 1 ms per sequence."""

    def prefill_time_s(self, prompt_tokens, cached_tokens=0):
        return 1e-3 * prompt_tokens + 1e-4 * cached_tokens

    def decode_step_time_s(self, batch, context_tokens):
        return 0.010 + 0.001 * batch


def sched(**kw):
    s = LlamaServerSettings(**{"slots": 4, "ctx_size": 4096, **kw})
    return lambda: LlamaServerScheduler(s, Linear())


def run(reqs, **kw):
    return simulate(sched(**kw), [ArrivingRequest(*r) for r in reqs])


def test_lone_request_is_prefill_then_steps():
    r = run([(0.0, 100, 5)])
    assert r.first_token_s[0] == pytest.approx(0.100)  # 100 prompt tokens in one iteration, first token sampled there
    # 4 more tokens, each one decode step at batch 1 (11 ms)
    assert r.finished_s[0] == pytest.approx(0.100 + 4 * 0.011)


def test_swa_checkpoints_split_the_prompt_tail():
    # Gemma 3 (SWA): the server stops 4 + ub and 4 tokens before the prompt's end; 600 tokens, ub 512 -> 84 + 512 + 4
    r = run([(0.0, 600, 1)], swa_checkpoints=True)
    assert r.first_token_s[0] == pytest.approx(0.084 + (0.512 + 84 * 1e-4) + (0.004 + 596 * 1e-4))
    r = run([(0.0, 600, 1)])  # no SWA: one 600-token batch, two micro-batches (512, then 88 after 512 cached)
    assert r.first_token_s[0] == pytest.approx(0.600 + 512 * 1e-4)


def test_batch_size_chunks_long_prompts():
    # -b 256: a 600-token prompt takes three iterations (256, 256, 88), each chunk attending to the cached part
    r = run([(0.0, 600, 1)], batch_size=256, ubatch_size=256)
    assert r.first_token_s[0] == pytest.approx(0.600 + 1e-4 * (256 + 512))


def test_arrival_during_an_iteration_waits_for_its_end():
    r = run([(0.0, 100, 1), (0.01, 100, 1)])
    # the second request is assigned when the first iteration ends (0.1 s) and runs its own prompt then
    assert r.first_token_s[1] == pytest.approx(0.200)


def test_slots_bound_concurrency_fifo():
    r = run([(0.0, 10, 3)] * 3, slots=2)
    # two slots take the first two; the third waits until a slot is released
    assert r.first_token_s[2] > r.finished_s[0] - 1e-12


def test_lru_picks_the_last_slot_first_and_split_equal_needs_consecutive_ids():
    # with -np 4 and no unified KV, the first request lands in slot 3, the second in slot 2 (LRU ties -> last)
    s = LlamaServerScheduler(LlamaServerSettings(slots=4, ctx_size=4096), Linear())
    from harness.target.timeline import SimRequest, Timeline

    tl = Timeline()
    s.bind(tl, lambda items, t: None, lambda r, t: None)
    a, b = SimRequest("a", 10, 50), SimRequest("b", 10, 50)
    s.submit(a, 0.0)
    tl.at(0.001, s.submit, b, 0.001)  # arrives while a's first iteration runs: assigned when it ends (10 ms)
    tl.run_due(0.002)
    assert [x.req.request_id if x.req else None for x in s.slots] == [None, None, None, "a"]
    tl.run_due(0.0101)
    assert [x.req.request_id if x.req else None for x in s.slots] == [None, None, "b", "a"]


def test_requests_queued_at_one_instant_start_together():
    """llama-server's loop wakes once for the tasks queued meanwhile: a capacity burst into four idle slots started four
    at a time on the real engine (first tokens within a millisecond), so the twin admits simultaneous arrivals together."""
    r = run([(0.0, 10, 3)] * 4, slots=4)
    assert len(set(r.first_token_s)) == 1 and len(set(r.finished_s)) == 1


def test_split_rules():
    decode = [(0, 1, 10, False), (2, 1, 10, False)]
    # non-consecutive slots: two micro-batches (two passes over the weights); unified KV: one
    assert [u.n_tokens for u in split_ubatches(decode, 512, unified=False)] == [1, 1]
    assert [u.n_tokens for u in split_ubatches(decode, 512, unified=True)] == [2]
    mixed = [(0, 1, 10, False), (1, 1, 10, False), (2, 300, 0, True)]
    # equal split: one token from each of slots 0, 1, 2, then the rest of the prompt alone
    assert [u.n_tokens for u in split_ubatches(mixed, 512, unified=False)] == [3, 299]
    assert [u.n_tokens for u in split_ubatches(mixed, 256, unified=True)] == [256, 46]
    # two prompts side by side split equally, n_ubatch // n_seqs tokens each
    two = [(0, 400, 0, True), (1, 400, 0, True)]
    assert [u.n_tokens for u in split_ubatches(two, 512, unified=False)] == [512, 288]


def test_ubatch_time_cases():
    st = Linear()
    assert ubatch_time_s(UBatch(((0, 1, 9, False), (1, 1, 19, False))), st) == pytest.approx(0.012)
    assert ubatch_time_s(UBatch(((0, 50, 100, True),)), st) == pytest.approx(0.05 + 0.01)
    # mixed: the decode token rides in the prompt's pass; the longer of the two
    assert ubatch_time_s(UBatch(((0, 1, 9, False), (1, 50, 0, True))), st) == pytest.approx(0.051)


def test_no_cont_batching_holds_prompts_while_decoding():
    on = run([(0.0, 10, 20), (0.05, 10, 2)])
    off = run([(0.0, 10, 20), (0.05, 10, 2)], cont_batching=False)
    assert on.first_token_s[1] < on.finished_s[0]
    assert off.first_token_s[1] > off.finished_s[0] - 1e-12  # waits until nothing is generating


def test_prompt_cache_reuses_the_slot_prefix():
    h = (11, 22)
    reqs = [ArrivingRequest(0.0, 1100, 1, h), ArrivingRequest(5.0, 1100, 1, h)]
    r = simulate(sched(slots=1), reqs)
    full = 1.1 + 1e-4 * (512 + 1024)  # micro-batches of 512, 512, 76 tokens
    assert r.first_token_s[0] == pytest.approx(full)
    # 1024 tokens (two 512-token blocks) reused: 76 new tokens after 1024 cached
    assert r.first_token_s[1] - 5.0 == pytest.approx(0.076 + 1e-4 * 1024)
    r = simulate(sched(slots=1, cache_prompt=False), reqs)
    assert r.first_token_s[1] - 5.0 == pytest.approx(full)


def test_context_limits():
    r = run([(0.0, 2000, 5)], ctx_size=4096, slots=4)  # slot context 1024
    assert r.rejected == 1
    r = run([(0.0, 1000, 100)], ctx_size=4096, slots=4)
    assert r.output_tokens[0] == 24  # generation stops at the slot's context


def test_settings_from_engine_flags():
    class O:
        parallel, ctx_size, batch_size, ubatch_size, cont_batching = 4, 8192, 2048, 512, True

    s = settings_from_engine(O, ["--kv-unified", "-sps", "0.5"], sliding_window=512, n_ctx_train=32768)
    assert s.kv_unified and s.slot_prompt_similarity == 0.5 and s.swa_checkpoints and s.n_ctx_slot == 8192
    assert not settings_from_engine(O, ["--swa-full"], sliding_window=512).swa_checkpoints
    assert settings_from_engine(O, [], sliding_window=None).n_ctx_slot == 2048
    with pytest.raises(HarnessError, match="slots"):
        LlamaServerSettings(slots=0)


def test_decode_correction_by_batch_interpolates_and_applies_per_iteration():
    st = LlamaServerSettings(slots=4, ctx_size=4096, iteration_overhead_s=0.001,
                             decode_correction_by_batch_s=[[4, 0.002], [1, -0.004], [2, 0.006]])  # as JSON gives it
    assert st.decode_correction_by_batch_s == ((1, -0.004), (2, 0.006), (4, 0.002))
    assert [st.iteration_extra_s(b) for b in (0, 1, 2, 3, 4, 8)] == pytest.approx([0.001, -0.004, 0.006, 0.004, 0.002, 0.002])
    # a lone decode request: every decode iteration is the step (10 ms here) - 4 ms
    r = run([(0.0, 10, 5)], decode_correction_by_batch_s=((1, -0.004),))
    r0 = run([(0.0, 10, 5)])
    assert (r.finished_s[0] - r.first_token_s[0]) == pytest.approx((r0.finished_s[0] - r0.first_token_s[0]) - 4 * 0.004)
    with pytest.raises(HarnessError, match="decode_correction_by_batch_s"):
        LlamaServerSettings(decode_correction_by_batch_s=((0, 0.001),))
    with pytest.raises(HarnessError, match="decode_correction_by_batch_s"):
        LlamaServerSettings(decode_correction_by_batch_s=((1, 0.001), (1, 0.002)))


def test_a_decode_split_into_micro_batches_pays_each_ones_correction_by_its_width():
    """Decodes in slots 0, 2, 3: split_equal makes micro-batches of 1 and 2 (steps 11 + 12 ms here); each pays the
    correction of its own width (+1 and +5 ms), not the batch-3 one (+20 ms) measured on three consecutive slots, which
    slots 0, 1, 2 still pay."""
    corr = ((1, 0.001), (2, 0.005), (3, 0.020))
    st = LlamaServerSettings(slots=4, ctx_size=4096, decode_correction_by_batch_s=corr)
    assert st.iteration_extra_s(3) == st.iteration_extra_s(3, [3]) == pytest.approx(0.020)
    assert st.iteration_extra_s(3, [1, 2]) == pytest.approx(0.006)

    def step_s(slots):
        r = simulate(sched(decode_correction_by_batch_s=corr), [ArrivingRequest(0.0, 10, 5, slot=s) for s in slots])
        return (max(r.finished_s) - max(r.first_token_s)) / 4

    assert step_s((0, 1, 2)) == pytest.approx(0.013 + 0.020)
    assert step_s((0, 2, 3)) == pytest.approx(0.011 + 0.001 + 0.012 + 0.005)
    assert step_s((0, 1, 3)) == pytest.approx(0.012 + 0.005 + 0.011 + 0.001)


def test_prefill_correction_by_prompt_length_interpolates_and_applies_to_prompt_microbatches():
    st = LlamaServerSettings(prefill_correction_by_tokens_s=[[512, 0.028], [32, 0.041]])  # as JSON gives it
    assert st.prefill_correction_by_tokens_s == ((32, 0.041), (512, 0.028))
    assert [st.prefill_extra_s(n) for n in (1, 32, 272, 512, 4096)] == pytest.approx([0.041, 0.041, 0.0345, 0.028, 0.028])
    assert LlamaServerSettings().prefill_extra_s(100) == 0.0
    # a lone 100-token prompt: its one prefill micro-batch gets the correction at 100 tokens; the decode steps do not
    corr = ((32, 0.040), (512, 0.020))
    r, r0 = run([(0.0, 100, 5)], prefill_correction_by_tokens_s=corr), run([(0.0, 100, 5)])
    extra = 0.040 + (0.020 - 0.040) * (100 - 32) / (512 - 32)
    assert r.first_token_s[0] == pytest.approx(r0.first_token_s[0] + extra)
    assert r.finished_s[0] - r.first_token_s[0] == pytest.approx(r0.finished_s[0] - r0.first_token_s[0])
    for bad in (((0, 0.001),), ((32, 0.001), (32, 0.002)), ((32, float("nan")),), (("x", 1),)):
        with pytest.raises(HarnessError, match="prefill_correction_by_tokens_s"):
            LlamaServerSettings(prefill_correction_by_tokens_s=bad)


def test_a_pinned_request_waits_for_its_slot_and_its_prompt_start_is_recorded():
    # both ask for slot 2: the second waits for the first to finish, though three other slots are idle
    r = simulate(sched(), [ArrivingRequest(0.0, 100, 5, slot=2), ArrivingRequest(0.0, 100, 5, slot=2)])
    assert r.first_token_s[0] == pytest.approx(0.100)
    assert r.prompt_start_s[1] == pytest.approx(r.finished_s[0])  # its prompt begins when slot 2 frees
    assert r.first_token_s[1] - r.prompt_start_s[1] == pytest.approx(0.100)
    free = simulate(sched(), [ArrivingRequest(0.0, 100, 5), ArrivingRequest(0.0, 100, 5)])
    assert free.prompt_start_s[1] == pytest.approx(0.0)  # unpinned: another slot, the same iteration
    with pytest.raises(HarnessError, match="slot 4"):
        simulate(sched(), [ArrivingRequest(0.0, 10, 2, slot=4)])


def test_mixed_correction_applies_to_iterations_that_carry_decode_and_prompt_tokens_only():
    st = LlamaServerSettings(mixed_correction_by_batch_tokens_s=[[3, 128, 0.09], [1, 512, 0.02], [1, 128, 0.04]])  # JSON-like
    assert st.mixed_correction_by_batch_tokens_s == ((1, 128, 0.04), (1, 512, 0.02), (3, 128, 0.09))
    # batch 1 reads its row in k; batch 3 its one knot; batch 2 halfway between the rows; no decode or no prompt: 0
    assert [st.mixed_extra_s(1, k) for k in (4, 128, 320, 512, 900)] == pytest.approx([0.04, 0.04, 0.03, 0.02, 0.02])
    assert [st.mixed_extra_s(3, 320), st.mixed_extra_s(4, 10), st.mixed_extra_s(2, 320)] == pytest.approx([0.09, 0.09, 0.06])
    assert st.mixed_extra_s(0, 128) == 0.0 and st.mixed_extra_s(1, 0) == 0.0
    corr = ((1, 128, 0.030), (3, 128, 0.100))
    # a prompt alone and a decode alone: nothing changes
    assert run([(0.0, 100, 5)], mixed_correction_by_batch_tokens_s=corr).finished_s[0] == pytest.approx(run([(0.0, 100, 5)]).finished_s[0])
    # a 100-token prompt sent while slot 3 decodes: its one iteration carries both (+30 ms), and so does the decode's
    reqs = [(0.0, 10, 40), (0.1, 100, 1)]
    r, r0 = run(reqs, mixed_correction_by_batch_tokens_s=corr), run(reqs)
    assert (r.first_token_s[1] - r.prompt_start_s[1]) - (r0.first_token_s[1] - r0.prompt_start_s[1]) == pytest.approx(0.030)
    assert r.finished_s[0] - r0.finished_s[0] == pytest.approx(0.030)
    # beside three decodes: +100 ms
    reqs3 = [(0.0, 10, 40)] * 3 + [(0.1, 100, 1)]
    r3, r30 = run(reqs3, mixed_correction_by_batch_tokens_s=corr), run(reqs3)
    assert (r3.first_token_s[3] - r3.prompt_start_s[3]) - (r30.first_token_s[3] - r30.prompt_start_s[3]) == pytest.approx(0.100)
    for bad in (((0, 128, 0.001),), ((1, 0, 0.001),), ((1, 128, 0.001), (1, 128, 0.002)), ((1, 128, float("nan")),), ((1, 128),)):
        with pytest.raises(HarnessError, match="mixed_correction_by_batch_tokens_s"):
            LlamaServerSettings(mixed_correction_by_batch_tokens_s=bad)


SAVE = {"prompt_save_s_per_prompt_token": 1e-3, "prompt_save_s_per_generated_token": 1e-4}


def test_host_ram_prompt_cache_copies_each_finished_slot_once_at_the_next_launch():
    # A (100 prompt, 5 out) ends in slot 1 holding 100 + 4 tokens; B's launch (slot 0, LRU) copies slot 1 as an idle slot
    # (0.1004 s) before B's prompt runs; C (slot 1 by LRU, already copied) copies the idle slot 0 (10 + 0 tokens)
    reqs = [(0.0, 100, 5), (1.0, 10, 1), (2.0, 10, 1)]
    r = run(reqs, slots=2, **SAVE)
    assert r.first_token_s[1] == pytest.approx(1.0 + 0.1004 + 0.010)
    assert r.first_token_s[2] == pytest.approx(2.0 + 0.010 + 0.010)
    assert run(reqs, slots=2, **SAVE, prompt_cache_ram=False).first_token_s[1] == pytest.approx(1.010)
    # without --cache-idle-slots only the slot chosen by LRU is copied: C pays for A's slot instead of B
    r = run(reqs, slots=2, **SAVE, cache_idle_slots=False)
    assert r.first_token_s[1] == pytest.approx(1.010)
    assert r.first_token_s[2] == pytest.approx(2.0 + 0.1004 + 0.010)


def test_the_copy_blocks_every_slot_of_the_server_loop():
    # D decodes 200 tokens in slot 1; A2 finishes in slot 0; E's launch copies slot 0 (10 + 1 tokens: 0.0101 s) and D's
    # stream waits for it as E's first token does
    reqs = [(0.0, 10, 200), (0.5, 10, 2), (1.0, 10, 1)]
    r, r0 = run(reqs, slots=2, **SAVE), run(reqs, slots=2)
    assert r.first_token_s[2] - r0.first_token_s[2] == pytest.approx(0.0101)
    assert r.finished_s[0] - r0.finished_s[0] == pytest.approx(0.0101)
    s = LlamaServerSettings(**SAVE)
    assert s.prompt_save_s(512, 63) == pytest.approx(0.5183)
    assert LlamaServerSettings(**SAVE, prompt_cache_ram=False).prompt_save_s(512, 63) == 0.0
    with pytest.raises(HarnessError, match="prompt_save_s_per_prompt_token"):
        LlamaServerSettings(prompt_save_s_per_prompt_token=-1.0)


def test_cache_ram_flags():
    class O:
        parallel, ctx_size, batch_size, ubatch_size, cont_batching = 4, 8192, 2048, 512, True

    assert settings_from_engine(O, []).prompt_cache_ram and settings_from_engine(O, []).cache_idle_slots
    assert not settings_from_engine(O, ["--cache-ram", "0"]).prompt_cache_ram
    assert not settings_from_engine(O, ["-cram=0"]).prompt_cache_ram
    assert settings_from_engine(O, ["-cram", "-1"]).prompt_cache_ram
    assert not settings_from_engine(O, ["--no-cache-idle-slots"]).cache_idle_slots
    with pytest.raises(HarnessError, match="--cache-ram"):
        settings_from_engine(O, ["--cache-ram", "lots"])


def test_of_slots_released_in_one_iteration_the_lowest_id_is_the_least_recently_used():
    # llama-server stamps t_last_used (µs) as it releases each finished slot, in slot order: measured on b11434
    # (2026-12-03, 3 trials): after slots 3, 2, 1, 0 were used in that order, two 20-token requests sent together landed
    # in slots 3 and 2; when both finished in one iteration the next four requests took slots 1, 0, 2, 3 (2 before 3),
    # and when the second had started an iteration later (so finished one later), 1, 0, 3, 2
    from harness.target.timeline import SimRequest
    from slot_picks import SlotPicks

    def taken(together: bool) -> list[int]:
        picks = SlotPicks(4)
        picks.pinned([3, 2, 1, 0])  # the loop's settle: one small request per slot, highest id first
        t = picks.t
        picks.send(SimRequest("a", 32, 20), t)
        picks.send(SimRequest("b", 32, 20), t if together else t + 0.001)  # a moment later: its prompt runs an iteration later
        picks.t = t + 2.0
        picks.tl.run_due(picks.t)
        assert sorted(x.id for x in picks.sched.slots if x.req is None) == [0, 1, 2, 3]
        return picks.take(4)

    assert taken(together=True) == [1, 0, 2, 3]
    assert taken(together=False) == [1, 0, 3, 2]
