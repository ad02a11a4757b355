"""`harness engine CONFIG --bench-pd --calibration FILE`: the calibration and the launched config reach bench-pd (whose
twin then predicts the run), and the prediction comes back with each bench; the session text shows it."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pandas as pd

from harness.bench import engine as uc
from harness.bench.pd import BenchPdResult
from workloads.summary import summarise


def fake_summary(**figures):
    return replace(summarise(pd.DataFrame(), span_s=1.0), **figures)


def fake_engine():
    proc = SimpleNamespace(metrics_path="/metrics", base_url="http://127.0.0.1:9")
    plan = SimpleNamespace(engine="llama.cpp", processes=(proc,), endpoint="http://127.0.0.1:9", served_name="m",
                           config_name="fake-llama")
    return SimpleNamespace(plan=plan)


def test_the_calibration_and_the_engine_config_reach_bench_pd(monkeypatch):
    seen = []
    pred = {"schema_version": 1, "simulated": True}

    def bench_pd(opts, progress=None):
        seen.append(opts)
        return BenchPdResult("run", [], fake_summary(requests_ok=1), opts.target_url, pred if opts.calibration else None)

    monkeypatch.setattr(uc, "bench_pd", bench_pd)
    monkeypatch.setattr(uc.prom, "scrape", lambda *a, **k: {})
    monkeypatch.setattr(uc, "crosscheck_llama_cpp", lambda *a, **k: [])
    monkeypatch.setattr(uc, "Run", lambda path: SimpleNamespace(table=lambda name: None))
    b = uc.bench_pd_against(fake_engine(), calibration="twin.json", engine_config="cfg.toml", proxy=True)
    o = seen[-1]
    assert (o.calibration, o.engine_config, o.proxy, o.target_url) == ("twin.json", "cfg.toml", True, "http://127.0.0.1:9")
    assert b.prediction == pred and b.to_dict()["prediction"] == pred
    b = uc.bench_pd_against(fake_engine())  # no calibration: nothing about a twin reaches bench-pd
    assert (seen[-1].calibration, seen[-1].engine_config, seen[-1].proxy) == (None, None, False) and b.prediction is None


def test_the_session_text_says_whether_the_run_was_predicted():
    from harness.report.engine import render_session

    t = SimpleNamespace(healthy_s=1.0, first_request_s=1.5, probe_latency_s=0.1)
    res = SimpleNamespace(time_to_ready=t, engine={"name": "llama.cpp"}, endpoint="http://x", metrics={}, notes=[],
                          stop_codes={"server": 0}, run_dir=None)
    bench = uc.BenchCheck("chat", "run", [], fake_summary(requests_ok=1, requests_total=1, output_tokens_per_s=2.0), [], None)
    text = render_session(res, [bench])
    assert "no prediction for this target" in text and "GPU PD plan" not in text
