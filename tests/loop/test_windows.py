"""Stage windows (harness.loop.windows): where they go between the served points, which ones predict each point,
and what the report's spread table reads from them."""

from __future__ import annotations

import pytest

from harness.loop.measure import RequestCheck
from harness.loop.windows import StageWindow, bracket, summarise, window_checks, window_points, windows_for


def check(phase: str, window: int, step_s: float | None = None, prompt_s: float | None = None) -> RequestCheck:
    n = 9 if step_s is not None else 1
    return RequestCheck(phase, 0, 0.1, prompt_s, None, 32, 32, n, n, n, 0, None, step_s * (n - 1) if step_s else None,
                        1.0, None, window)


def test_windows_go_evenly_between_the_points_and_the_last_after_the_last():
    assert window_points(range(10), 3) == (4, 9)
    assert window_points(range(10), 4) == (3, 6, 9)
    assert window_points([0, 1], 3) == (0, 1)
    assert window_points([0, 1], 5) == (0, 1)  # never two windows after one point
    assert window_points(range(10), 1) == () and window_points([], 3) == ()


def test_each_point_is_bracketed_by_the_windows_before_and_after_it():
    ws = [StageWindow(0, 0.0, None, 9, 30.0), StageWindow(1, 300.0, 4, 9, 30.0), StageWindow(2, 600.0, 9, 9, 30.0)]
    assert [bracket(p, ws) for p in (0, 4, 5, 9)] == [(0, 1), (0, 1), (1, 2), (1, 2)]
    assert bracket(3, ws[:1]) == (0,)  # the loop stopped before the next window
    assert windows_for("first", 7, ws) == (0,) and windows_for("all", 7, ws) == (0, 1, 2)
    with pytest.raises(ValueError, match="unknown window mode"):
        windows_for("latest", 0, ws)


def test_summary_reads_each_window_alone_and_the_spread_is_over_the_median():
    cs = [check("prefill", 0, prompt_s=0.60), check("prefill", 1, prompt_s=0.66), check("decode@1", 0, step_s=0.015),
          check("decode@1", 1, step_s=0.012), check("decode@4", 1, step_s=0.045)]
    s0, s1 = summarise(cs, 0), summarise(cs, 1)
    assert s0.prefill_prompt_s == pytest.approx(0.60) and dict(s0.decode_step_s_by_batch) == {1: pytest.approx(0.015)}
    assert dict(s1.decode_step_s_by_batch) == {1: pytest.approx(0.012), 4: pytest.approx(0.045)}
    assert [c.window for c in window_checks(cs, 1)] == [1, 1, 1]


def test_a_later_window_takes_the_prompt_cache_copy_from_window_0():
    cs = [check("savebase", 0), check("save@512/64", 0), check("case@512/64", 0), check("prefill", 0, prompt_s=0.6),
          check("prefill", 1, prompt_s=0.7)]
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
    from harness.loop.windows import combine

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
    from harness.loop.windows import combine, correction_summary

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
