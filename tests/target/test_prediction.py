"""The twin's prediction record of one load run: the artifact's rows over the load generator's window, versioned,
round-tripped, a newer or damaged file refused; errors are (predicted − measured) / measured."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.served import Percentiles, ServedPoint
from harness.target.prediction import (PREDICTION_SCHEMA_VERSION, PredictionSource, TargetPrediction, compare_prediction,
                                         predict_artifact)
from harness.target.twin import predict_point, requests_from_rows
from workloads.summary import summarise
from twin_fixtures import roofline_twin

ROWS = [{"intended_s": 2.0 * i, "prompt_tokens_target": 128, "max_tokens": 6, "prefix_group": -1, "prefix_tokens": 0}
        for i in range(10)]
SRC = PredictionSource("twin.json", "twin.json", "llama.cpp", "gemma-like", "test")


def test_the_prediction_is_the_twin_over_the_load_generators_window():
    spec = roofline_twin()
    p = predict_artifact(spec, ROWS, span_s=20.0, rate_per_s=0.5, warmup_s=4.0, cooldown_s=2.0, source=SRC, notes=("n1",))
    direct = predict_point(spec.make_scheduler, requests_from_rows(ROWS), rate_per_s=0.5, span_s=20.0, warmup_s=4.0, cooldown_s=2.0)
    assert p.figures == direct and (p.window_start_s, p.window_end_s) == (4.0, 18.0) and p.requests == 10
    assert p.figures.requests_measured == 7  # intended sends 4, 6, ..., 16 s
    assert p.simulated and p.notes[0] == "n1" and p.capacity_requests_per_s > 0.5
    back = TargetPrediction.from_dict(p.to_dict())
    assert back == p


def test_a_newer_or_damaged_prediction_is_refused():
    d = predict_artifact(roofline_twin(), ROWS, span_s=20.0, rate_per_s=0.5, source=SRC).to_dict()
    with pytest.raises(HarnessError, match="newer than this harness understands"):
        TargetPrediction.from_dict({**d, "schema_version": PREDICTION_SCHEMA_VERSION + 1})
    with pytest.raises(HarnessError, match="field 'figures' is missing"):
        TargetPrediction.from_dict({k: v for k, v in d.items() if k != "figures"})
    with pytest.raises(HarnessError, match="schema_version is missing"):
        TargetPrediction.from_dict({k: v for k, v in d.items() if k != "schema_version"})


def test_errors_against_a_measured_summary():
    p = predict_artifact(roofline_twin(), ROWS, span_s=20.0, rate_per_s=0.5, source=SRC)
    f = p.figures
    summary = replace(summarise(pd.DataFrame(), span_s=1.0), window_note=None,
                      request_throughput_per_s=f.request_throughput_per_s * 2, output_tokens_per_s=0.0,
                      ttft_s=Percentiles(1, p50=f.ttft_p50_s / 2), tpot_s=Percentiles(1, p50=f.tpot_p50_s),
                      e2e_s=Percentiles(1, p50=f.e2e_p50_s))
    c = compare_prediction(p, summary)
    assert c.simulated and c.point == ServedPoint(128, 6, rate_per_s=0.5, workload="bench-pd workload")
    r = {row.metric: row for row in c.rows}
    assert list(r) == ["request_throughput_per_s", "output_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "e2e_p50_s"]
    assert r["request_throughput_per_s"].error == pytest.approx(-0.5)
    assert r["ttft_p50_s"].error == pytest.approx(1.0) and r["tpot_p50_s"].error == pytest.approx(0.0)
    assert r["output_tokens_per_s"].error is None and r["ttft_p90_s"].error is None  # nothing measured: no error
    assert not any(row.judged for row in c.rows)  # bench-pd shows its errors; it sets no targets
    empty = compare_prediction(p, replace(summary, window_note="nothing completed"))
    assert empty.rows[0].measured is None


def test_a_version_1_prediction_loads_with_its_lengths_not_recorded():
    d = predict_artifact(roofline_twin(), ROWS, span_s=20.0, rate_per_s=0.5, source=SRC).to_dict()
    old = {k: v for k, v in d.items() if k not in ("input_tokens_mean", "output_tokens_mean")} | {"schema_version": 1}
    p = TargetPrediction.from_dict(old)
    assert p.input_tokens_mean is None and p.served_point().mix == "?/?"
    assert p.served().figure("ttft_p50_s") == p.figures.ttft_p50_s
