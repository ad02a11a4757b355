"""harness.served: the Percentiles record and the one error convention (signed fraction, shown as %)."""

import math

import pytest

from harness.errors import HarnessError
from harness.served import Percentiles, fmt_error_pct, relative_error


def test_percentiles_from_values_skip_missing_and_match_numpy():
    p = Percentiles.from_values([1.0, None, 2.0, math.nan, 3.0, 4.0])
    assert p.count == 4 and p.mean == 2.5 and p.max == 4.0
    assert p.p50 == pytest.approx(2.5) and p.p90 == pytest.approx(3.7) and p.p99 == pytest.approx(3.97)


def test_empty_percentiles_and_dict_round_trip():
    e = Percentiles.from_values([])
    assert e.empty and e.p50 is None and e.to_dict() == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p = Percentiles.from_values([0.1, 0.2])
    assert Percentiles.from_dict(p.to_dict()) == p
    assert Percentiles.from_dict(None) == e and Percentiles.from_dict({"count": 3, "p50": 1}) == Percentiles(3, p50=1.0)


def test_bad_stored_percentiles_name_the_field():
    with pytest.raises(HarnessError, match="p90 must be a number"):
        Percentiles.from_dict({"count": 1, "p90": "fast"}, source="summary.json ttft_s")
    with pytest.raises(HarnessError, match="count must be an integer >= 0"):
        Percentiles(-1)
    with pytest.raises(HarnessError, match="no statistic 'p95'"):
        Percentiles().get("p95")


def test_relative_error_is_a_signed_fraction():
    assert relative_error(110.0, 100.0) == pytest.approx(0.10)
    assert relative_error(90.0, 100.0) == pytest.approx(-0.10)
    assert relative_error(1.0, 0.0) is None and relative_error(None, 1.0) is None and relative_error(math.inf, 1.0) is None
    assert fmt_error_pct(0.1234) == "+12.3%" and fmt_error_pct(-0.05, digits=0) == "-5%" and fmt_error_pct(None) == "—"
