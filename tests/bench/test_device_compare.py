"""harness.bench.device_compare: the device loop's twins against its served points, on a hand-made work folder."""

from __future__ import annotations

import json
import math

import pytest

from harness.bench.device_compare import compare_work, markdown, spread, store_run
from harness.errors import HarnessError
from harness.store import Run


def _fig(rate, ttft, tpot):  # the twin's ServedFigures as predictions.json holds them
    return {"rate_per_s": rate, "requests_measured": 40, "request_throughput_per_s": rate, "output_tokens_per_s": 64 * rate,
            "ttft_p50_s": ttft, "ttft_p90_s": 2 * ttft, "tpot_p50_s": tpot, "e2e_p50_s": ttft + 63 * tpot, "rejected": 0}


def _work(tmp_path, served):
    pred = {"planned_on": "a", "twins": {"a": {"label": "(a) fit"}, "b": {"label": "(b) roofline"}},
            "twins_missing": {"b_proxy": "no suites"},
            "points": [
                {"point": 0, "mix": "512/64", "kind": "burst", "fraction": None, "rate_per_s": None, "requests": 40,
                 "predicted": {"a": {"capacity_rps": 10.2}, "b": {"capacity_rps": 8.0}}},
                {"point": 1, "mix": "512/64", "kind": "rate", "fraction": 0.5, "rate_per_s": 5.0, "requests": 40,
                 "predicted": {"a": _fig(5.0, 0.110, 0.0100), "b": _fig(5.0, 0.080, 0.0080)}},
                {"point": 2, "mix": "512/64", "kind": "rate", "fraction": 1.2, "rate_per_s": 12.0, "requests": 96,
                 "predicted": {"a": _fig(12.0, 1.0, 0.02), "b": _fig(12.0, 0.5, 0.015)}},
            ]}
    (tmp_path / "predictions.json").write_text(json.dumps(pred))
    (tmp_path / "served.jsonl").write_text("".join(json.dumps(r) + "\n" for r in served))
    return tmp_path


def _m(point, mix, rate, **fig):
    from harness.served import Percentiles, ServedMeasurement, ServedPoint

    i, o = (int(x) for x in mix.split("/"))
    pt = ServedPoint(i, o, rate_per_s=rate, workload=mix, index=point)
    ttft, tpot = fig.pop("ttft", None), fig.pop("tpot", None)
    m = ServedMeasurement(pt, f"load-{point}", ttft_s=Percentiles(40, p50=ttft) if ttft else Percentiles(),
                          tpot_s=Percentiles(40, p50=tpot) if tpot else Percentiles(), requests_ok=40, requests_total=40, **fig)
    return m.to_dict()


SERVED = [
    {"point": 0, "repeat": 0, "measurement": _m(0, "512/64", math.inf, capacity_requests_per_s=10.0)},
    {"point": 1, "repeat": 0, "measurement": _m(1, "512/64", 5.0, ttft=0.100, tpot=0.0100)},
    {"point": 0, "repeat": 1, "measurement": _m(0, "512/64", math.inf, capacity_requests_per_s=9.8)},
    {"point": 1, "repeat": 1, "measurement": _m(1, "512/64", 5.0, ttft=0.104, tpot=0.0098)},
]


def test_every_point_metric_and_twin_is_compared_with_the_repeats_median_and_spread(tmp_path):
    cmp = compare_work(_work(tmp_path, SERVED))
    rows = {(r["point"], r["metric"], r["twin"]): r for r in cmp["rows"]}
    cap = rows[(0, "capacity_requests_per_s", "a")]
    assert cap["measured"] == pytest.approx(9.9) and cap["repeats"] == 2
    assert cap["error"] == pytest.approx((10.2 - 9.9) / 9.9) and cap["within_target"] is True  # 3.0 % < 5 %
    assert cap["repeat_spread"] == pytest.approx(0.2 / 9.9)
    assert rows[(0, "capacity_requests_per_s", "b")]["within_target"] is False  # -19 %
    ttft = rows[(1, "ttft_p50_s", "a")]
    assert ttft["measured"] == pytest.approx(0.102) and ttft["error"] == pytest.approx(0.110 / 0.102 - 1)
    # point 2 was never measured (the deadline): its rows have no error and it is listed
    assert rows[(2, "tpot_p50_s", "a")]["error"] is None and cmp["unmeasured_points"] == [2]
    v = cmp["verdict"]
    assert v["a"]["judged"] == 3 and v["a"]["within_target"] == 3  # capacity 3 %, TTFT 7.8 %, TPOT 1 %
    assert v["b"]["judged"] == 3 and v["b"]["within_target"] == 0
    assert v["engine_repeat_spread_median"] == pytest.approx(sorted([0.2 / 9.9, 0.004 / 0.102, 0.0002 / 0.0099])[1])


def test_markdown_lists_rows_verdicts_and_what_is_missing(tmp_path):
    text = markdown(compare_work(_work(tmp_path, SERVED)))
    assert "| 0 | 512/64 | burst | capacity_requests_per_s | a | 10.2 req/s | 9.9 req/s (2) | +3.0% | 2.0% |" in text
    assert "twin (a) fit: 3 of 3 figures within target" in text
    assert "twin b_proxy not built: no suites" in text and "points not measured (deadline or failure): [2]" in text


def test_the_comparison_is_stored_as_one_run_import_device_can_file(tmp_path):
    w = _work(tmp_path, SERVED)
    cmp = compare_work(w)
    run = Run(store_run(w, cmp))
    assert run.manifest.kind == "loop-gpu-device"
    assert len(run.table("device_loop_comparison")) == len(cmp["rows"])
    assert len(run.table("device_loop_served")) == 4
    assert (run.path / "predictions.json").is_file()


def test_spread_and_missing_inputs():
    assert spread([1.0]) is None and spread([1.0, 1.1]) == pytest.approx(0.1 / 1.05)


def test_missing_or_cut_files_are_clear_errors(tmp_path):
    with pytest.raises(HarnessError, match="predictions.json is missing"):
        compare_work(tmp_path)
    w = _work(tmp_path, SERVED)
    (w / "served.jsonl").write_text('{"point": 0, "rep')
    with pytest.raises(HarnessError, match="line 1 is not JSON"):
        compare_work(w)
