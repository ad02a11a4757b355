"""harness.units formatters: the one place base units become ms, %, GB and SI-prefixed text."""

import math

import numpy as np
import pytest

from harness.units import fmt_ms, fmt_num, fmt_pct, fmt_si, is_missing


@pytest.mark.parametrize("x", [None, math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("nan")])
def test_missing_values_show_the_missing_text(x):
    assert is_missing(x)
    assert fmt_ms(x) == "—" and fmt_num(x, missing="n/a") == "n/a" and fmt_pct(x) == "n/a" and fmt_si(x, "B") == "—"


def test_figures():
    assert fmt_ms(0.01234) == "12.3 ms" and fmt_ms(0.01234, 2, suffix="") == "12.34"
    assert fmt_num(2.5e9, ".1f", 1e-9, " GB") == "2.5 GB" and fmt_num(7, ".3g") == "7"
    assert fmt_pct(0.4567) == "45.7%" and fmt_pct(0.0123, 2, sign=True) == "+1.23%" and fmt_pct(0.5, 0) == "50%"
    assert fmt_si(2.5e9, "B/s") == "2.5 GB/s" and fmt_si(12.3456, "s", nd_unprefixed=4) == "12.35 s"
    assert not is_missing(0) and not is_missing("text")
