"""The twin's stage corrections (harness.target.corrections), fitted from the isolated requests (calibration subset
"stages"): the iteration overhead by batch, the context, prefill and mixed-iteration corrections, the prompt-cache copy."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from harness.errors import HarnessError

from harness.target.corrections import (combine, context_correction, correction_summary, iteration_overhead_s, mixed_correction,
                                        mixed_prompt_s, prefill_correction_s, prompt_alone_s, prompt_save)
from harness.target.stage_requests import MIXED_PROMPT_SLOT, PREFILL_DECODE_TOKENS, RequestCheck, mixed_phase, window_checks


def _Check(phase: str, client_decode_s: float | None, client_chunks: int, error: str | None = None,
           tokens: int | None = None, ttft_s: float = 0.1, e2e_s: float | None = None) -> RequestCheck:
    """A RequestCheck with the fields the estimates read (tokens: usage.completion_tokens, default the chunks)."""
    n = client_chunks if tokens is None else tokens
    e2e = e2e_s if e2e_s is not None else ttft_s + (client_decode_s or 0.0)
    return RequestCheck(phase=phase, rep=0, client_ttft_s=ttft_s, engine_prompt_s=None, ttft_minus_engine_prompt_s=None,
                        engine_prompt_tokens=None, usage_prompt_tokens=None, client_chunks=client_chunks,
                        usage_completion_tokens=n, engine_predicted_tokens=n, chunks_minus_usage=client_chunks - n,
                        engine_decode_s=None, client_decode_s=client_decode_s, e2e_s=e2e, error=error)


class _Steps:
    """A step-time source whose decode step is 10 ms + 5 ms per sequence (context ignored)."""

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        assert context_tokens == pytest.approx(32 + 63 / 2)
        return 0.010 + 0.005 * batch


def _decode(batch: int, step_s: float, chunks: int = 64) -> _Check:
    return _Check(f"decode@{batch}", step_s * (chunks - 1), chunks)


def test_median_over_batches_of_client_step_minus_twin_step():
    # client steps: the twin's step + 2 ms, + 3 ms, + 7 ms -> per batch 2, 3, 7 ms; the median is 3 ms
    checks = [_Check("prefill", None, 0), _decode(1, 0.017), _decode(1, 0.017), _decode(2, 0.023), _decode(4, 0.037)]
    it = iteration_overhead_s(checks, _Steps(), 32, 64)
    assert it is not None
    assert it.value_s == pytest.approx(0.003)
    assert [b for b, _ in it.per_batch_s] == [1, 2, 4]
    assert [x for _, x in it.per_batch_s] == pytest.approx([0.002, 0.003, 0.007])


def test_a_faster_engine_gives_no_negative_overhead():
    it = iteration_overhead_s([_decode(1, 0.012), _decode(2, 0.015)], _Steps(), 32, 64)
    assert it is not None and it.value_s == 0.0
    assert [x for _, x in it.per_batch_s] == pytest.approx([-0.003, -0.005])


def test_failed_or_single_chunk_requests_are_left_out():
    checks = [_Check("decode@1", 1.0, 64, error="timeout"), _Check("decode@2", None, 1), _Check("decode@4", 0.0, 1)]
    assert iteration_overhead_s(checks, _Steps(), 32, 64) is None


def test_a_stream_with_fewer_events_than_tokens_is_stepped_by_its_tokens():
    # llama-server holds back a token whose text is empty: 20 content events for 64 tokens. The events' span then
    # covers an unknown number of steps; E2E - TTFT over 63 steps is the step (the old estimate read 3.3x too long).
    c = _Check("decode@1", client_decode_s=0.35, client_chunks=20, tokens=64, ttft_s=0.05, e2e_s=0.05 + 63 * 0.0055)
    assert c.client_step_s == pytest.approx(0.0055)
    assert _Check("decode@1", 0.63, 64).client_step_s == pytest.approx(0.01)  # one event per token: the events' span
    it = iteration_overhead_s([c], _Steps(), 32, 64)
    assert it is not None and it.per_batch_s[0][1] == pytest.approx(0.0055 - 0.015)


class _Linear:
    """prefill of a chunk 20 ms + 1 ms per token (+ 0.01 ms per token of context before it), decode 10 ms + 5 ms per
    sequence."""

    def prefill_time_s(self, n, cached=0):
        return 0.020 + 0.001 * n + 1e-5 * cached

    def decode_step_time_s(self, batch, context_tokens):
        return 0.010 + 0.005 * batch


def _twin(**settings):
    from harness.target.llama_server import LlamaServerSettings
    from harness.target.twin import TwinSpec

    return TwinSpec("llama.cpp", LlamaServerSettings(slots=4, ctx_size=8192, **settings), _Linear(), "m", "test")


def _prompt(phase, s, n, error=None):
    return SimpleNamespace(phase=phase, engine_prompt_s=s, engine_prompt_tokens=n, error=error)


_PROMPTS = [_prompt("prefill", 0.95, 512), _prompt("prefill", 0.90, 512), _prompt("prefill", 1.10, 512),
            _prompt("decode@1", 0.12, 32), _prompt("decode@1", 0.11, 32), _prompt("decode@1", 0.20, 32),
            _prompt("decode@4", 0.50, 32),  # four prompts together: not a prompt alone
            _prompt("prefill", 9.0, 512, error="timeout"), _prompt("prefill", None, 512)]


@pytest.mark.parametrize("settings", [{}, {"swa_checkpoints": True, "iteration_overhead_s": 0.012},
                                      {"swa_checkpoints": True, "ubatch_size": 128, "request_overhead_s": 0.02}])
def test_prefill_correction_makes_the_twin_take_the_engines_prompt_time(settings):
    # with checkpoints a prompt runs as 2+ micro-batches (32 -> 28 + 4 tokens), each with the iteration correction:
    # the correction is solved so the twin's own simulation of each isolated prompt matches the median measured
    twin = _twin(**settings)
    got = prefill_correction_s(_PROMPTS, twin)
    assert [n for n, _ in got] == [32, 512]
    corrected = replace(twin, settings=replace(twin.settings, prefill_correction_by_tokens_s=got))
    assert prompt_alone_s(corrected, 32) == pytest.approx(0.12, abs=1e-6)
    assert prompt_alone_s(corrected, 512) == pytest.approx(0.95, abs=1e-6)
    if twin.settings.ubatch_size < 512:
        return  # with -ub 128 no micro-batch is longer than 128 tokens: a knot at 512 is never reached (least squares)
    # a third length (the "prompt" requests at a served mix's length) is a third knot, reproduced too
    got3 = prefill_correction_s(_PROMPTS + [_prompt("prompt", 0.30, 128), _prompt("prompt", 0.32, 128)], twin)
    assert [n for n, _ in got3] == [32, 128, 512]
    corrected = replace(twin, settings=replace(twin.settings, prefill_correction_by_tokens_s=got3))
    for n, t in ((32, 0.12), (128, 0.31), (512, 0.95)):
        assert prompt_alone_s(corrected, n) == pytest.approx(t, abs=1e-6)


def test_prefill_correction_without_splits_is_the_plain_difference():
    got = prefill_correction_s(_PROMPTS, _twin())
    assert [x for _, x in got] == pytest.approx([0.12 - 0.052, 0.95 - 0.532])  # one pass each, at context 0
    assert prefill_correction_s([_prompt("decode@2", 0.1, 32)], _twin()) == ()


def test_context_correction_by_batch_from_the_long_and_short_steps():

    # twin step 15 ms at any B and context; the engine's batch-1 step is 17 ms after the 32-token prompts and 27 ms
    # after the 512-token ones (10 ms over (512 + 7.5) - (32 + 31.5) = 456 context tokens); at batch 4, 20 ms and
    # 38 ms: 18 ms over 4 sequences x 456 tokens
    n = PREFILL_DECODE_TOKENS
    long1 = [_Check("prefill", 0.027 * (n - 1), n) for _ in range(3)]
    short1 = [_Check("decode@1", 0.017 * 63, 64), _Check("decode@1", 0.016 * 63, 64), _Check("decode@1", 0.018 * 63, 64)]
    long4 = [_Check("longdecode@4", 0.038 * (n - 1), n) for _ in range(4)]
    short4 = [_Check("decode@4", 0.020 * 63, 64) for _ in range(4)]

    class Flat:
        def decode_step_time_s(self, b, ctx):
            return 0.015

    cc = context_correction(long1 + short1 + long4 + short4, Flat(), 512, 32, 64)
    assert cc is not None
    d = (512 + (n - 1) / 2) - (32 + 31.5)
    assert cc.ref_tokens == pytest.approx(32 + 31.5) and cc.long_tokens == pytest.approx(512 + (n - 1) / 2)
    assert [b for b, _ in cc.s_per_token_by_batch] == [1, 4]
    assert [x for _, x in cc.s_per_token_by_batch] == pytest.approx([0.010 / d, 0.018 / (4 * d)])
    only1 = context_correction(long1 + short1, Flat(), 512, 32, 64)
    assert only1 is not None and [b for b, _ in only1.s_per_token_by_batch] == [1]
    assert context_correction(short1 + short4, Flat(), 512, 32, 64) is None  # no long-context step measured
    assert context_correction(long1 + short1, Flat(), 64, 32, 64) is None  # contexts too close to separate


def test_context_correction_at_batch_1_reads_its_paired_long_decode_not_the_prefill_phase():
    """With "longdecode@1" requests (interleaved with the short batch-1 reps, seconds apart) the batch-1 long side is
    theirs alone; the prefill phase's own decode, a minute earlier at the window's start, is read only by runs stored
    before batch 1 was paired (2026-12-03 09:45 run: it read +6.61 µs a token where the served steps showed none)."""

    n = PREFILL_DECODE_TOKENS

    class Flat:
        def decode_step_time_s(self, b, ctx):
            return 0.015

    drifted = [_Check("prefill", 0.030 * (n - 1), n) for _ in range(3)]  # the host slower at the window's start
    paired = [_Check("longdecode@1", 0.019 * (n - 1), n) for _ in range(2)]
    short1 = [_Check("decode@1", 0.017 * 63, 64) for _ in range(3)]
    d = (512 + (n - 1) / 2) - (32 + 31.5)
    cc = context_correction(drifted + paired + short1, Flat(), 512, 32, 64)
    assert cc is not None and cc.s_per_token_by_batch == ((1, pytest.approx(0.002 / d)),)
    assert cc.residuals_s[0] == (1, pytest.approx(0.004), pytest.approx(0.002))
    old = context_correction(drifted + short1, Flat(), 512, 32, 64)  # a stored run without them: the prefill's decode
    assert old is not None and old.s_per_token_by_batch == ((1, pytest.approx(0.013 / d)),)


def test_the_twin_adds_the_context_correction_per_decode_sequence():
    from harness.target.des import ArrivingRequest, simulate

    def tpot(twin, prompt, n=1):
        r = simulate(twin.make_scheduler, [ArrivingRequest(0.0, prompt, 33) for _ in range(n)], record_tokens=True)
        t = r.token_times_s[0]
        return (t[-1] - t[0]) / (len(t) - 1)

    plain = _twin()
    corrected = _twin(decode_context_s_per_token_by_batch=((1, 1e-5), (4, 4e-6)), decode_context_ref_tokens=100.0)
    # at context ~100 nothing changes; at ~1000 each batch-1 step is 1e-5 s x ~900 context tokens longer, each batch-4
    # step 4e-6 s x 4 sequences x ~900
    assert tpot(corrected, 84) == pytest.approx(tpot(plain, 84), abs=2e-4)
    assert tpot(corrected, 984) - tpot(plain, 984) == pytest.approx(1e-5 * (984 + 17 - 100), rel=0.02)
    assert tpot(corrected, 984, 4) - tpot(plain, 984, 4) == pytest.approx(4 * 4e-6 * (984 + 17 - 100), rel=0.05)


def _mixed_checks(truth_twin, cases, window=0, host=1.0, alone=False, stopped=False):
    """The checks measure_mixed_prompts would write had the engine been `truth_twin` on a host `host` x slower than when
    the rest of the window was measured: per (P, B, delay) B decodes of 32 tokens generating 200 (their first tokens
    0.2 s after their send) and a P-token prompt sent `delay` after those; with `alone`, the same prompt alone just before;
    with `stopped`, the decodes stopped after 2 of their 200 tokens (no usage; the engine's timings so far)."""

    out = []
    for rep, (p, b, delay) in enumerate(cases):
        if alone:
            out.append(SimpleNamespace(phase=mixed_phase(p, b, "mixedalone"), window=window, rep=rep, error=None,
                                       engine_prompt_tokens=p, engine_prompt_s=host * prompt_alone_s(truth_twin, p, MIXED_PROMPT_SLOT)))
        out += [SimpleNamespace(phase=mixed_phase(p, b, "mixeddecode"), window=window, rep=rep, error=None, client_ttft_s=0.2,
                                usage_completion_tokens=None if stopped else 200, engine_predicted_tokens=2 if stopped else 200,
                                engine_prompt_tokens=32, usage_prompt_tokens=None if stopped else 32, max_tokens=200,
                                stopped=stopped) for _ in range(b)]
        out.append(SimpleNamespace(phase=mixed_phase(p, b), window=window, rep=rep, error=None, sent_after_s=0.2 + delay,
                                   engine_prompt_tokens=p, engine_prompt_s=host * mixed_prompt_s(truth_twin, 32, 200, p, b, delay)))
    return out


@pytest.mark.parametrize("settings", [{}, {"swa_checkpoints": True, "iteration_overhead_s": 0.012,
                                           "decode_correction_by_batch_s": ((1, -0.003), (2, 0.004))}])
def test_mixed_correction_recovers_what_a_prompt_costs_beside_decodes(settings):

    truth = ((1, 128, 0.030), (1, 512, 0.055), (3, 128, 0.090), (3, 512, 0.120))
    twin = _twin(**settings)
    engine = replace(twin, settings=replace(twin.settings, mixed_correction_by_batch_tokens_s=truth))
    checks = _mixed_checks(engine, [(128, 1, 0.004), (128, 1, 0.009), (512, 1, 0.002), (512, 1, 0.011),
                                    (128, 3, 0.003), (512, 3, 0.006)])
    mc = mixed_correction(checks, twin)
    assert mc is not None and mc.n_requests == 6
    assert [(b, p) for b, p, _ in mc.per_cell_s] == [(1, 128), (1, 512), (3, 128), (3, 512)]
    assert [x for _, _, x in mc.per_cell_s] == pytest.approx([0.030, 0.055, 0.090, 0.120], abs=1e-5)
    # the twin before the correction was faster than the engine by at least one correction per mixed iteration
    for (b, p, m), (_, _, t) in zip(mc.measured_s, mc.twin_s):
        assert m - t >= dict(((bb, pp), x) for bb, pp, x in truth)[(b, p)] - 1e-6
    fixed = replace(twin, settings=replace(twin.settings, mixed_correction_by_batch_tokens_s=mc.per_cell_s))
    for b in (1, 3):
        assert mixed_prompt_s(fixed, 32, 200, 128, b, 0.004) == pytest.approx(mixed_prompt_s(engine, 32, 200, 128, b, 0.004), abs=1e-5)


def test_decodes_stopped_once_the_prompt_is_done_give_the_same_correction():
    """measure_mixed_prompts stops the decodes after their prompt: the twin's decodes ask for the tokens the engine's
    were asked for (max_tokens), not the 2 they had streamed, and the correction is the one the full decodes give."""

    truth = ((1, 128, 0.030), (1, 512, 0.055))
    twin = _twin()
    engine = replace(twin, settings=replace(twin.settings, mixed_correction_by_batch_tokens_s=truth))
    cases = [(128, 1, 0.004), (512, 1, 0.011)]
    full = mixed_correction(_mixed_checks(engine, cases, alone=True), twin)
    stopped = mixed_correction(_mixed_checks(engine, cases, alone=True, stopped=True), twin)
    assert stopped is not None and stopped.n_requests == 2
    assert [x for _, _, x in stopped.per_cell_s] == pytest.approx([x for _, _, x in full.per_cell_s], abs=1e-9)
    assert [x for _, _, x in stopped.per_cell_s] == pytest.approx([0.030, 0.055], abs=1e-5)


def test_mixed_correction_takes_the_extra_over_the_alone_prompt_just_before_so_host_drift_cancels():
    """The prompts beside the decodes ran on a host 30 % slower than the window's prefill correction was measured on;
    their alone prompts just before ran there too. Paired, the twin is solved to its own alone time plus the engine's
    extra (the extra itself 1.3 x, the only trace of the drift); taken absolute, the correction absorbs 30 % of the
    whole prompt."""

    def mixed_alone_s(t, p):
        return prompt_alone_s(t, p, MIXED_PROMPT_SLOT)

    truth = ((1, 128, 0.030), (1, 512, 0.055))
    twin = _twin()
    engine = replace(twin, settings=replace(twin.settings, mixed_correction_by_batch_tokens_s=truth))
    cases = [(128, 1, 0.004), (128, 1, 0.009), (512, 1, 0.002), (512, 1, 0.011)]
    paired = mixed_correction(_mixed_checks(engine, cases, host=1.3, alone=True), twin)
    assert paired is not None and paired.n_paired == paired.n_requests == 4
    fixed = replace(twin, settings=replace(twin.settings, mixed_correction_by_batch_tokens_s=paired.per_cell_s))
    for p, delay in ((128, 0.004), (512, 0.011)):
        want = 1.3 * (mixed_prompt_s(engine, 32, 200, p, 1, delay) - mixed_alone_s(engine, p))
        assert mixed_prompt_s(fixed, 32, 200, p, 1, delay) - mixed_alone_s(fixed, p) == pytest.approx(want, abs=2e-3)
    assert [a for _, _, a in paired.alone_s] == pytest.approx([1.3 * mixed_alone_s(engine, p) for p in (128, 512)])
    absolute = mixed_correction(_mixed_checks(engine, cases, host=1.3), twin)  # no alone prompts (a run stored before them)
    assert absolute is not None and absolute.n_paired == 0
    for (_, p, x), (_, _, t) in zip(absolute.per_cell_s, truth):
        assert x - t > 0.25 * mixed_alone_s(engine, p)  # the drift lands in the correction (one mixed iteration here)
    # a window without drift: paired and absolute agree with the truth
    same = mixed_correction(_mixed_checks(engine, cases, alone=True), twin)
    assert [x for _, _, x in same.per_cell_s] == pytest.approx([0.030, 0.055], abs=1e-5)


def test_mixed_correction_leaves_out_failed_requests_and_needs_two_slots():

    twin = _twin()
    checks = _mixed_checks(twin, [(128, 1, 0.004)])
    late = SimpleNamespace(**{**vars(checks[1]), "rep": 1, "error": "a decode finished first", "engine_prompt_s": 9.0})
    mc = mixed_correction(checks + [late], twin)
    assert mc is not None and mc.n_requests == 1 and mc.per_cell_s[0][2] == pytest.approx(0.0, abs=1e-6)
    assert mixed_correction([c for c in checks if c.phase.startswith("mixed@")], twin) is None  # no decode to pair with
    one_slot = replace(twin, settings=replace(twin.settings, slots=1))
    assert mixed_correction(checks, one_slot) is None



def _c(phase: str, rep: int, over_s: float | None, error: str | None = None) -> RequestCheck:
    return RequestCheck(phase=phase, rep=rep, client_ttft_s=0.05, engine_prompt_s=0.04, ttft_minus_engine_prompt_s=over_s,
                        engine_prompt_tokens=16, usage_prompt_tokens=16, client_chunks=1, usage_completion_tokens=1,
                        engine_predicted_tokens=1, chunks_minus_usage=0, engine_decode_s=None, client_decode_s=None,
                        e2e_s=0.05, error=error)


def _case(p: int, o: int, rep: int, copy_s: float, base_s: float = 0.002, slots: int = 4) -> list[RequestCheck]:
    # one of the `slots` small requests after the case pays the copy; every one pays the baseline
    return [_c(f"save@{p}/{o}", rep, base_s + (copy_s if i == 1 else 0.0)) for i in range(slots)]


def test_recovers_known_per_token_costs_and_the_baseline():
    per_p, per_g = 120e-6, 40e-6
    checks = [_c("savewarm", i, 0.3) for i in range(4)] + [_c("savebase", i, x) for i, x in enumerate((0.002, 0.0021, 0.0019, 0.002))]
    for p, o in ((512, 64), (128, 256), (512, 33)):
        for rep in range(2):
            checks += _case(p, o, rep, per_p * p + per_g * (o - 1))
    checks.append(_c("save@512/64", 0, None, error="reset"))  # a failed request is left out
    ps = prompt_save(checks)
    assert ps is not None
    assert ps.baseline_s == pytest.approx(0.002)  # the warm-up requests (0.3 s) are not the baseline
    assert ps.per_prompt_s == pytest.approx(per_p, rel=1e-6) and ps.per_generated_s == pytest.approx(per_g, rel=1e-6)
    assert [k[:2] for k in ps.knots] == [(128, 255), (512, 32), (512, 63)]
    assert ps.predicted_s(512, 63) == pytest.approx(per_p * 512 + per_g * 63)


def test_median_over_reps_and_costs_never_negative():
    checks = [_c("savebase", 0, 0.002)]
    checks += _case(512, 64, 0, 0.060) + _case(512, 64, 1, 0.070) + _case(512, 64, 2, 0.300)  # one rep disturbed
    checks += _case(128, 256, 0, 0.0) + _case(128, 256, 1, 0.0)  # no copy seen: a fit without generated cost
    ps = prompt_save(checks)
    assert ps.knots[1] == (512, 63, pytest.approx(0.070))
    assert ps.per_prompt_s >= 0 and ps.per_generated_s >= 0


def test_nothing_measured_is_none():
    assert prompt_save([]) is None
    assert prompt_save([_c("savebase", 0, 0.002)]) is None
    assert prompt_save(_case(512, 64, 0, 0.06)) is None  # no baseline


# the twin's host-speed scale (LlamaServerSettings.step_scale): every iteration × it
def test_step_scale_multiplies_every_iteration():
    from harness.target.des import ArrivingRequest, simulate
    from harness.target.llama_server import LlamaServerScheduler, LlamaServerSettings

    class Steps:
        def prefill_time_s(self, p, cached=0):
            return 1e-3 * p

        def decode_step_time_s(self, b, ctx):
            return 0.010

    def run(scale):
        st = LlamaServerSettings(slots=1, ctx_size=4096, iteration_overhead_s=0.002, step_scale=scale)
        return simulate(lambda: LlamaServerScheduler(st, Steps()), [ArrivingRequest(0.0, 50, 11)]).finished_s[0]

    assert run(1.5) == pytest.approx(1.5 * run(1.0))
    with pytest.raises(HarnessError, match="step_scale"):
        run(0.0)


# ---------------------------------------------------------------- several stage windows: one twin, each correction their median

def window_check(phase: str, window: int, step_s: float | None = None, prompt_s: float | None = None) -> RequestCheck:
    n = 9 if step_s is not None else 1
    return RequestCheck(phase, 0, 0.1, prompt_s, None, 32, 32, n, n, n, 0, None, step_s * (n - 1) if step_s else None,
                        1.0, None, window)


def test_a_later_window_takes_the_prompt_cache_copy_from_window_0():
    cs = [window_check("savebase", 0), window_check("save@512/64", 0), window_check("case@512/64", 0), window_check("prefill", 0, prompt_s=0.6),
          window_check("prefill", 1, prompt_s=0.7)]
    assert [(c.phase, c.window) for c in window_checks(cs, 1)] == [("prefill", 1), ("savebase", 0), ("save@512/64", 0),
                                                                    ("case@512/64", 0)]
    assert window_checks(cs, 0) == [c for c in cs if c.window == 0]


def twin(over, b4, pre512, ctx, mixed=()):
    """A llama.cpp twin with these stage corrections (what one window's corrected twin carries)."""
    from harness.target.llama_server import LlamaServerSettings
    from harness.target.twin import TwinSpec

    s = LlamaServerSettings(slots=4, ctx_size=8192, request_overhead_s=over, iteration_overhead_s=over,
                            decode_correction_by_batch_s=((1, 0.0), (4, b4)), prefill_correction_by_tokens_s=((512, pre512),),
                            decode_context_s_per_token_by_batch=ctx, mixed_correction_by_batch_tokens_s=mixed)
    return TwinSpec("llama.cpp", s, None, "m.gguf", "test", ())


def test_combine_takes_the_median_of_each_correction_at_every_knot():
    ts = [twin(0.001, 0.002, 0.05, ((1, 1e-6),), ((1, 128, 0.03), (3, 128, 0.2))), twin(0.003, 0.004, 0.03, ((1, 3e-6),), ((1, 128, 0.05),)),
          twin(0.002, -0.001, 0.10, (), ((1, 128, 0.01), (3, 128, 0.1)))]
    c = combine(ts, "windows 1 + 2 + 3").settings
    assert c.request_overhead_s == pytest.approx(0.002) and c.iteration_overhead_s == pytest.approx(0.002)
    assert dict(c.decode_correction_by_batch_s) == {1: 0.0, 4: pytest.approx(0.002)}
    assert dict(c.prefill_correction_by_tokens_s) == {512: pytest.approx(0.05)}
    assert dict(c.decode_context_s_per_token_by_batch) == {1: pytest.approx(2e-6)}  # the window without one does not vote
    # grids at the union of their cells: the window without a batch-3 row reads its batch-1 row there (nearest outside)
    assert {(b, k): x for b, k, x in c.mixed_correction_by_batch_tokens_s} == {(1, 128): pytest.approx(0.03), (3, 128): pytest.approx(0.1)}
    assert c.slots == 4 and combine(ts[:1]) is ts[0]
    # knots that differ: each table is read at the union of them
    a = twin(0.0, 0.0, 0.0, ())
    b = replace_knots(twin(0.0, 0.0, 0.0, ()), ((128, 0.01), (512, 0.05)))
    assert dict(combine([a, b, b]).settings.prefill_correction_by_tokens_s) == {128: pytest.approx(0.01), 512: pytest.approx(0.05)}


def replace_knots(t, knots):
    from dataclasses import replace

    return replace(t, settings=replace(t.settings, prefill_correction_by_tokens_s=knots))


def test_the_correction_summary_lists_every_cell_of_the_combined_twin_with_each_window_read_there():
    ts = [twin(0.001, 0.002, 0.05, ((1, 1e-6),), ((1, 128, 0.03), (3, 128, 0.2))), twin(0.003, 0.004, 0.03, ((1, 3e-6),), ((1, 128, 0.05),)),
          twin(0.002, -0.001, 0.10, (), ((1, 128, 0.01), (3, 128, 0.1)))]
    text = correction_summary(combine(ts), ts)
    assert text.split("; ") == [
        "prefill 512 tokens +50.0 ms (+50.0, +30.0, +100.0)",
        "decode B=1 +0.0 ms (+0.0, +0.0, +0.0)",
        "decode B=4 +2.0 ms (+2.0, +4.0, -1.0)",
        "context B=1 +2.00 µs a token (+1.00, +3.00, —)",  # the window without one shows a dash
        "mixed B=1 128 tokens +30.0 ms (+30.0, +50.0, +10.0)",
        "mixed B=3 128 tokens +100.0 ms (+200.0, +50.0, +100.0)"]  # window 2 has no batch-3 row: it reads batch 1's
    assert correction_summary(twin(0.0, 0.0, 0.0, ()), []) == "prefill 512 tokens +0.0 ms (); decode B=1 +0.0 ms (); decode B=4 +0.0 ms ()"
