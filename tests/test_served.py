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


# ---------------------------------------------------------------- the served-point records and the one comparison

import json  # noqa: E402

from harness.served import (METRICS, Interval, ServedComparison, ServedMeasurement, ServedPoint, ServedPrediction,  # noqa: E402
                            compare_served, comparison_rows, comparisons_from_rows)

POINT = ServedPoint(512, 64, rate_per_s=0.8, workload="512/64", index=2)


def _prediction(point=POINT, **kw):
    return ServedPrediction(point, "twin (test)", ttft_s=Percentiles(30, p50=1.1, p90=2.0), tpot_s=Percentiles(30, p50=0.05),
                            request_throughput_per_s=0.8, capacity_requests_per_s=1.0, **kw)


def _measurement(ttft_p50=1.0, tpot_p50=0.05, point=POINT, **kw):
    return ServedMeasurement(point, "results/x/run", ttft_s=Percentiles(28, p50=ttft_p50, p90=2.5), tpot_s=Percentiles(28, p50=tpot_p50),
                             request_throughput_per_s=0.78, requests_ok=28, requests_total=28, **kw)


def test_a_point_is_open_or_closed_loop_never_both_and_says_its_load():
    assert POINT.mix == "512/64" and POINT.load_text() == "0.8 req/s" and not POINT.closed_loop
    assert ServedPoint(128, 256, rate_per_s=math.inf).load_text() == "all at once"
    closed = ServedPoint(4000, 500, concurrency=8)
    assert closed.closed_loop and closed.load_text() == "concurrency 8"
    with pytest.raises(HarnessError, match="exactly one of rate_per_s"):
        ServedPoint(512, 64, rate_per_s=1.0, concurrency=4)
    with pytest.raises(HarnessError, match="exactly one of rate_per_s"):
        ServedPoint(512, 64)
    with pytest.raises(HarnessError, match="input_tokens must be a positive number, got 0"):
        ServedPoint(0, 64, rate_per_s=1.0)
    with pytest.raises(HarnessError, match="concurrency must be an integer >= 1"):
        ServedPoint(512, 64, concurrency=0)


def test_compare_served_gives_fraction_errors_and_judges_only_what_has_a_target():
    c = compare_served(_prediction(), _measurement(), targets={"ttft_p50_s": 0.10, "tpot_p50_s": 0.10})
    assert [r.metric for r in c.rows] == ["capacity_requests_per_s", "request_throughput_per_s", "ttft_p50_s", "ttft_p90_s",
                                          "tpot_p50_s"]
    ttft = c.row("ttft_p50_s")
    assert ttft.error == pytest.approx(0.10) and ttft.target == 0.10 and ttft.within is True and ttft.label == "TTFT p50"
    assert c.row("ttft_p90_s").error == pytest.approx(-0.2) and c.row("ttft_p90_s").within is None  # no target: shown only
    assert c.row("capacity_requests_per_s").measured is None and c.row("capacity_requests_per_s").error is None
    assert c.within == 2 and len(c.judged) == 2 and c.simulated and c.predicted_by == "twin (test)"
    miss = compare_served(_prediction(), _measurement(ttft_p50=0.9), targets={"ttft_p50_s": 0.10})
    assert miss.row("ttft_p50_s").within is False and miss.row("ttft_p50_s").error == pytest.approx(0.2222, abs=1e-4)


def test_compare_served_states_why_a_figure_is_not_judged_and_keeps_intervals_and_repeats():
    iv = Interval(0.9, 1.2, 0.95, 28, "bootstrap over requests")
    reps = [_measurement(ttft_p50=x) for x in (0.9, 1.1)]
    meas = ServedMeasurement.median_of(reps, intervals={"ttft_p50_s": iv})
    assert meas.figure("ttft_p50_s") == pytest.approx(1.0) and meas.requests_ok == 56 and meas.ttft_s.count == 56
    c = compare_served(_prediction(), meas, targets={"ttft_p50_s": 0.10, "capacity_requests_per_s": 0.05},
                       metrics=["ttft_p50_s", "capacity_requests_per_s"], not_judged_metrics={"ttft_p50_s": "cut at the drain"},
                       notes={"capacity_requests_per_s": "from the burst"})
    row = c.row("ttft_p50_s")
    assert row.within is None and row.note == "cut at the drain" and row.measured_interval == iv
    assert row.repeat_values == (0.9, 1.1)
    assert c.row("capacity_requests_per_s").note == "from the burst" and c.row("capacity_requests_per_s").within is None
    out = compare_served(_prediction(), meas, targets={"ttft_p50_s": 0.10}, not_judged="contended (62 % of its cores)")
    assert out.row("ttft_p50_s").within is None and out.row("ttft_p50_s").note == "contended (62 % of its cores)"
    assert out.row("ttft_p90_s").note == ""  # no target: nothing to exclude


def test_compare_served_refuses_two_points_and_a_percent_target():
    other = ServedPoint(512, 64, rate_per_s=1.2, workload="512/64", index=3)
    with pytest.raises(HarnessError, match="same point"):
        compare_served(_prediction(), _measurement(point=other))
    with pytest.raises(HarnessError, match="must be a fraction such as 0.10"):
        compare_served(_prediction(), _measurement(), targets={"ttft_p50_s": 10})
    with pytest.raises(HarnessError, match="no served metric 'ttft_p95_s'"):
        compare_served(_prediction(), _measurement(), targets={"ttft_p95_s": 0.1})


def test_records_round_trip_through_json_and_a_table():
    pd = pytest.importorskip("pandas")
    burst = ServedPoint(128, 256, rate_per_s=math.inf, workload="128/256", index=8)
    iv = Interval(0.9, 1.2, 0.95, 28, "bootstrap over requests")
    meas = ServedMeasurement.median_of([_measurement(), _measurement(ttft_p50=1.2)], intervals={"ttft_p50_s": iv})
    comps = [compare_served(_prediction(), meas, targets={"ttft_p50_s": 0.1}),
             compare_served(_prediction(burst), _measurement(point=burst), targets={"capacity_requests_per_s": 0.05}),
             compare_served(_prediction(ServedPoint(4000, 500, concurrency=8)), _measurement(point=ServedPoint(4000, 500, concurrency=8)))]
    for c in comps:
        assert ServedComparison.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert ServedMeasurement.from_dict(json.loads(json.dumps(meas.to_dict()))) == meas
    p = _prediction(notes=("simulated in 0.1 s",))
    assert ServedPrediction.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    rows = comparison_rows(comps)
    assert len(rows) == sum(len(c.rows) for c in comps) and rows[0]["point_index"] == 2
    table = pd.DataFrame(rows).to_dict("records")  # missing values become NaN, integers with gaps floats
    assert comparisons_from_rows(table) == tuple(comps)


def test_a_stored_table_reads_back_through_the_store(tmp_path):
    """The store stamps its own schema_version on the table; the comparison reads back the same."""
    from harness.records import new_manifest
    from harness.store import Run, RunWriter

    comps = [compare_served(_prediction(), _measurement(), targets={"ttft_p50_s": 0.1})]
    with RunWriter(new_manifest("load"), tmp_path) as w:
        w.append("served_comparison", comparison_rows(comps))
    assert comparisons_from_rows(Run(w.path).table("served_comparison").to_dict("records")) == tuple(comps)
    with pytest.raises(HarnessError, match="row 0: expected a mapping"):
        comparisons_from_rows([1])


def test_every_metric_reads_from_both_records():
    pred, meas = _prediction(), _measurement()
    assert pred.figure("ttft_p90_s") == 2.0 and meas.figure("tpot_p50_s") == 0.05 and meas.figure("e2e_p50_s") is None
    assert {m.unit for m in METRICS.values()} == {"s", "req/s", "tokens/s"}
