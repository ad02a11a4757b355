"""Run summary from records: window exclusion, goodput against SLOs, schedule lag invalidates a run."""

import pandas as pd
import pytest

from workloads.config import SummaryOptions
from workloads.summary import summarise


def _rec(i, intended_s, ttft_s, tpot_s, lag_s=0.001, n=11, cls="ok"):
    sent = intended_s + lag_s
    first = sent + ttft_s
    chunks = [int((first + k * tpot_s) * 1e9) for k in range(n)]
    last = chunks[-1] / 1e9
    return {"request_index": i, "intended_ns": int(intended_s * 1e9), "sent_ns": int(sent * 1e9), "last_byte_ns": int(last * 1e9),
            "chunk_ns": chunks, "error_class": cls, "ttft_s": ttft_s, "ttft_from_intended_s": ttft_s + lag_s,
            "tpot_s": tpot_s, "e2e_s": last - sent, "e2e_from_intended_s": last - intended_s, "schedule_lag_s": lag_s,
            "output_tokens_usage": n, "output_tokens_chunks": n, "token_count_mismatch": False, "usage_missing": False}


def test_goodput_counts_requests_meeting_every_slo():
    rows = [_rec(i, i * 0.5, 0.2 if i % 2 else 0.8, 0.02) for i in range(20)]  # 10 fast, 10 slow TTFT
    s = summarise(pd.DataFrame(rows), span_s=10.0, options=SummaryOptions(slo_ttft_s=0.5, slo_tpot_s=0.05))
    assert s.requests_measured == 20
    assert s.goodput_fraction == pytest.approx(0.5)
    assert s.goodput_per_s == pytest.approx(10 / 10.0)
    assert s.tpot_s["p50"] == pytest.approx(0.02, rel=1e-6)
    assert s.itl_s["p50"] == pytest.approx(0.02, rel=1e-3)
    assert s.valid


def test_warmup_and_cooldown_exclude_by_intended_time():
    rows = [_rec(i, float(i), 0.1, 0.01) for i in range(10)]
    s = summarise(pd.DataFrame(rows), span_s=10.0, options=SummaryOptions(warmup_s=2.0, cooldown_s=3.0))
    assert (s.window_start_s, s.window_end_s) == (2.0, 7.0)
    assert s.requests_measured == 5


def test_lagging_client_invalidates_the_run():
    rows = [_rec(i, i * 0.1, 0.1, 0.01, lag_s=0.2) for i in range(50)]
    s = summarise(pd.DataFrame(rows), span_s=5.0, options=SummaryOptions(max_lag_p99_s=0.05))
    assert not s.valid
    assert "schedule lag" in s.invalid_reasons[0]


def test_errors_are_counted_by_class_and_excluded_from_latency():
    rows = [_rec(0, 0.0, 0.1, 0.01), _rec(1, 0.5, 9.0, 0.01, cls="timeout")]
    s = summarise(pd.DataFrame(rows), span_s=1.0)
    assert s.errors_by_class == {"ok": 1, "timeout": 1}
    assert s.ttft_s["max"] == pytest.approx(0.1)
