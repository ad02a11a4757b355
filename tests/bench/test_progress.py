"""harness.bench.progress: phases, in flight, ETA from successive progress lines; plain/rich/quiet output."""

import io

import pytest

from harness.bench.progress import SIMULATED_NOTE, LoadProgress, ProgressTracker, final_line, render_line
from harness.errors import HarnessError


def P(t, sent, done, span=20.0, expected=40, errors=0, ttft=None):
    return {"t_s": t, "span_s": span, "sent": sent, "done": done, "expected": expected, "errors": errors,
            "ttft_p50_s": ttft, "ttft_n": 0 if ttft is None else 10}


def test_phases_backlog_until_completions_keep_up_then_steady_then_drain():
    tr = ProgressTracker()
    # 2 req/s sent; nothing completes for 6 s (startup), then the backlog is worked off at 4 req/s
    views = [tr.update(P(t, 2 * t, 0)) for t in range(0, 7)]
    assert {v.phase for v in views} == {"startup backlog"} and views[-1].in_flight == 12 and views[-1].eta_s is None
    v = tr.update(P(7, 14, 4))
    assert v.phase == "startup backlog"  # 4 done vs 4 sent over the last 5 s... (t 2..7: sent 10, done 4)
    for t in range(8, 13):
        v = tr.update(P(t, 2 * t, 4 + 4 * (t - 7)))
    assert v.phase == "steady" and v.in_flight == 0
    v = tr.update(P(21, 40, 38))
    assert v.phase == "drain" and v.in_flight == 2


def test_steady_stays_steady_and_eta_is_the_longer_of_schedule_and_completions():
    tr = ProgressTracker()
    for t in range(0, 6):
        v = tr.update(P(t, 2 * t, max(0, 2 * t - 1)))
    assert v.phase == "steady"
    # window t 0..5: 9 completions in 5 s = 1.8/s; 31 remaining -> 17.2 s, longer than the schedule's 15 s left
    assert v.eta_s == pytest.approx(31 / 1.8)
    v = tr.update(P(6, 12, 11, ttft=0.25))
    assert v.ttft_p50_s == 0.25 and v.eta_s == pytest.approx(max(14.0, 29 / 2.0))
    assert tr.update(P(25, 40, 40)).eta_s == 0.0


def test_plain_mode_prints_every_interval_and_the_last_state_then_a_simulated_final_line():
    out = io.StringIO()
    pr = LoadProgress("plain", stream=out, plain_every_s=10.0)
    for t in range(0, 13):
        pr.update(P(t, 2 * t, max(0, 2 * t - 1), ttft=0.5))
    pr.close(simulated=True)
    lines = out.getvalue().splitlines()
    assert [ln.split("]")[0] for ln in lines[:3]] == ["[    0.0 / 20 s", "[   10.0 / 20 s", "[   12.0 / 20 s"]
    assert "steady" in lines[1] and "in flight    1" in lines[1] and "TTFT p50 500 ms" in lines[1]
    assert lines[-1].startswith("load: 23/40 requests done (0 errors) after 12.0 s of a 20 s schedule")
    assert lines[-1].endswith(SIMULATED_NOTE)


def test_quiet_prints_nothing_and_a_real_target_is_not_called_simulated():
    out = io.StringIO()
    pr = LoadProgress("quiet", stream=out)
    pr.update(P(1, 2, 1))
    pr.close(simulated=True)
    assert out.getvalue() == ""
    assert "SIMULATED" not in final_line(ProgressTracker().update(P(1, 2, 1)), False)


def test_rich_mode_draws_the_line_and_ends_with_the_final_line():
    out = io.StringIO()
    pr = LoadProgress("rich", stream=out)
    for t in range(0, 4):
        pr.update(P(t, 2 * t, 0, errors=1))
    pr.close(simulated=False)
    text = out.getvalue()
    assert "startup backlog" in text and "in flight 6" in text and "errors 1" in text
    assert text.rstrip().splitlines()[-1] == "load: 0/40 requests done (1 errors) after 3.0 s of a 20 s schedule"


def test_auto_mode_is_plain_without_a_terminal_and_a_bad_mode_is_refused():
    assert LoadProgress("auto", stream=io.StringIO()).mode == "plain"
    with pytest.raises(HarnessError, match="progress mode must be one of auto, rich, plain, quiet, got 'loud'"):
        LoadProgress("loud")  # type: ignore[arg-type]
    assert "ETA —" in render_line(ProgressTracker().update(P(0, 0, 0)))
