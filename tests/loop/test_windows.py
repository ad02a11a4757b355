"""Stage windows (harness.loop.windows): where they go between the served points, which ones predict each point,
and what the report's spread table reads from them."""

from __future__ import annotations

import pytest

from harness.loop.measure import RequestCheck
from harness.loop.windows import StageWindow, bracket, of_windows, spread_pct, summarise, window_points, windows_for


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
    assert windows_for("first", 7, ws) == (0,) and windows_for("pooled", 7, ws) == (0, 1, 2)
    with pytest.raises(ValueError, match="unknown window mode"):
        windows_for("latest", 0, ws)


def test_summary_reads_each_window_alone_and_the_spread_is_over_the_median():
    cs = [check("prefill", 0, prompt_s=0.60), check("prefill", 1, prompt_s=0.66), check("decode@1", 0, step_s=0.015),
          check("decode@1", 1, step_s=0.012), check("decode@4", 1, step_s=0.045)]
    s0, s1 = summarise(cs, 0), summarise(cs, 1)
    assert s0.prefill_prompt_s == pytest.approx(0.60) and dict(s0.decode_step_s_by_batch) == {1: pytest.approx(0.015)}
    assert dict(s1.decode_step_s_by_batch) == {1: pytest.approx(0.012), 4: pytest.approx(0.045)}
    assert [c.window for c in of_windows(cs, (1,))] == [1, 1, 1]
    assert spread_pct([0.60, 0.66]) == pytest.approx(100 * 0.06 / 0.63)
    assert spread_pct([0.6]) is None and spread_pct([None, 0.6]) is None
