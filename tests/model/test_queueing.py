"""Fluid queue after startup (Chapter 9, §9.6.1, §9.7.2, Fig. 9-42)."""

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.model.queueing import (
    clear_at_s,
    drain,
    drain_time_s,
    min_rate_for_deadline,
    queue_length,
    startup_backlog,
)


def test_chapter_drain_numbers():
    assert startup_backlog(3.5, 10) == 35
    assert drain_time_s(3.5, 10, 4.55) == pytest.approx(33.3, abs=0.05)
    assert clear_at_s(3.5, 10, 4.55) == pytest.approx(43.3, abs=0.05)
    assert clear_at_s(3.5, 10, 4.17) == pytest.approx(62.2, abs=0.1)  # with the rounded 4.17
    assert clear_at_s(3.5, 10, 3.02) is None
    assert min_rate_for_deadline(3.5, 10, 60) == pytest.approx(4.2)


def test_queue_curve_matches_closed_form():
    t = np.linspace(0, 120, 1201)
    q = queue_length(3.5, 10, 4.55, t)
    assert q[100] == pytest.approx(35)  # t = 10 s
    clear = clear_at_s(3.5, 10, 4.55)
    assert q[t > clear + 0.1].max() == 0
    assert q[(t > 10) & (t < clear - 0.1)].min() > 0
    grow = queue_length(3.5, 10, 3.02, 60.0)
    assert float(grow) == pytest.approx(35 + 0.48 * 50)


def test_drain_result_flags_deadline():
    d = drain("pd", 3.5, 10, 4.55, 60)
    assert d.meets_deadline and d.net_drain_per_s == pytest.approx(1.05)
    assert drain("x", 3.5, 10, 3.0, 60).meets_deadline is False


def test_deadline_before_ready_is_refused():
    with pytest.raises(HarnessError, match="deadline_s"):
        min_rate_for_deadline(3.5, 10, 5)
