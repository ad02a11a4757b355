"""Stage windows: where they go between the served points, and what the report's spread table reads from them."""

from __future__ import annotations

import pytest

from harness.loop.windows import window_points
from harness.loop_records.windows import StageWindow
from harness.target.stage_requests import RequestCheck


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


def test_each_window_reads_its_own_requests_and_round_trips():
    cs = [check("prefill", 0, prompt_s=0.60), check("prefill", 1, prompt_s=0.66), check("decode@1", 0, step_s=0.015),
          check("decode@1", 1, step_s=0.012), check("decode@4", 1, step_s=0.045)]
    s0 = StageWindow(0, 0.0, None, 9, 30.0).summarised(cs)
    s1 = StageWindow(1, 300.0, 4, 9, 30.0).summarised(cs)
    assert s0.prefill_prompt_s == pytest.approx(0.60) and dict(s0.decode_step_s_by_batch) == {1: pytest.approx(0.015)}
    assert dict(s1.decode_step_s_by_batch) == {1: pytest.approx(0.012), 4: pytest.approx(0.045)}
    assert StageWindow.from_dict(s1.to_dict()) == s1
