"""harness.bench.device_compare: the device loop's twins against its served points, on a hand-made work folder."""

from __future__ import annotations

import json

import pytest

from harness.bench.device_compare import compare_work, markdown, spread, store_run
from harness.errors import HarnessError
from harness.store import Run


def _work(tmp_path, served):
    pred = {"planned_on": "a", "twins": {"a": {"label": "(a) fit"}, "b": {"label": "(b) roofline"}},
            "twins_missing": {"b_proxy": "no suites"},
            "points": [
                {"point": 0, "mix": "512/64", "kind": "burst", "fraction": None, "rate_per_s": None, "requests": 40,
                 "predicted": {"a": {"capacity_rps": 10.2}, "b": {"capacity_rps": 8.0}}},
                {"point": 1, "mix": "512/64", "kind": "rate", "fraction": 0.5, "rate_per_s": 5.0, "requests": 40,
                 "predicted": {"a": {"ttft_p50_s": 0.110, "tpot_p50_s": 0.0100},
                               "b": {"ttft_p50_s": 0.080, "tpot_p50_s": 0.0080}}},
                {"point": 2, "mix": "512/64", "kind": "rate", "fraction": 1.2, "rate_per_s": 12.0, "requests": 96,
                 "predicted": {"a": {"ttft_p50_s": 1.0, "tpot_p50_s": 0.02}, "b": {"ttft_p50_s": 0.5, "tpot_p50_s": 0.015}}},
            ]}
    (tmp_path / "predictions.json").write_text(json.dumps(pred))
    (tmp_path / "served.jsonl").write_text("".join(json.dumps(r) + "\n" for r in served))
    return tmp_path


SERVED = [
    {"point": 0, "repeat": 0, "saturated_rps": 10.0, "requests_ok": 40},
    {"point": 1, "repeat": 0, "ttft_p50_s": 0.100, "tpot_p50_s": 0.0100, "requests_ok": 40},
    {"point": 0, "repeat": 1, "saturated_rps": 9.8, "requests_ok": 40},
    {"point": 1, "repeat": 1, "ttft_p50_s": 0.104, "tpot_p50_s": 0.0098, "requests_ok": 40},
]


def test_every_point_metric_and_twin_is_compared_with_the_repeats_median_and_spread(tmp_path):
    cmp = compare_work(_work(tmp_path, SERVED))
    rows = {(r["point"], r["metric"], r["twin"]): r for r in cmp["rows"]}
    cap = rows[(0, "capacity_rps", "a")]
    assert cap["measured"] == pytest.approx(9.9) and cap["repeats"] == 2
    assert cap["error"] == pytest.approx((10.2 - 9.9) / 9.9) and cap["within_target"] is True  # 3.0 % < 5 %
    assert cap["repeat_spread"] == pytest.approx(0.2 / 9.9)
    assert rows[(0, "capacity_rps", "b")]["within_target"] is False  # -19 %
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
    assert "| 0 | 512/64 | burst | capacity_rps | a | 10.2 req/s | 9.9 req/s (2) | +3.0% | 2.0% |" in text
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
