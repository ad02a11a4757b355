"""harness.bench.target_latency: per-request latency as the embedded target scheduled it (simulated seconds)."""

import json
import urllib.request

import pytest

from harness.bench.target_latency import fetch_emit_log, latency_percentiles, target_latency


def test_latency_from_arrival_and_scheduled_instants_in_simulated_seconds():
    ms = 1_000_000
    log = {"request_ids": ["a", "b", "never-arrived"], "arrival_ns": [0, 100 * ms, -1],
           "request_index": [0, 0, 0, 1, 2], "token_index": [0, 1, 2, 0, 0],
           "scheduled_ns": [50 * ms, 60 * ms, 70 * ms, 130 * ms, 999 * ms], "emit_ns": [0] * 5}
    df = target_latency(log, time_scale=0.1).set_index("response_id")
    assert list(df.index) == ["a", "b"]  # a request that never reached the engine has no latency
    assert df.loc["a", "ttft_s"] == pytest.approx(0.5) and df.loc["a", "tpot_s"] == pytest.approx(0.1)
    assert df.loc["a", "e2e_s"] == pytest.approx(0.7) and df.loc["b", "ttft_s"] == pytest.approx(0.3)
    st = latency_percentiles(df.reset_index(), response_ids=["b"])
    assert st["ttft"] == {"count": 1, "p50": pytest.approx(0.3), "p95": pytest.approx(0.3), "p99": pytest.approx(0.3)}
    assert st["tpot"]["count"] == 0 and st["tpot"]["p95"] is None  # one token: no TPOT


def test_a_live_target_logs_arrivals_so_its_schedule_gives_the_profile_exactly():
    from harness.target.process import start_target

    with start_target(["--profile", "fixed", "--ttft-s", "0.05", "--itl-s", "0.01", "--time-scale", "0.5"]) as t:
        body = {"model": "m", "prompt": "a b c", "max_tokens": 4, "stream": True}
        req = urllib.request.Request(t.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        rid = None
        with urllib.request.urlopen(req, timeout=30) as r:
            for line in r:
                if line.startswith(b"data: {"):
                    rid = json.loads(line[6:])["id"]
        log = fetch_emit_log(t.url)
    assert log["arrival_ns"] and min(log["arrival_ns"]) > 0
    (row,) = target_latency(log, time_scale=0.5).to_dict("records")
    # however late the machine ran the target, its schedule is arrival + 50 ms, then one token every 10 ms
    assert row["response_id"] == rid and row["tokens"] == 4
    assert row["ttft_s"] == pytest.approx(0.05, abs=1e-6) and row["tpot_s"] == pytest.approx(0.01, abs=1e-6)
    assert row["e2e_s"] == pytest.approx(0.08, abs=1e-6)
