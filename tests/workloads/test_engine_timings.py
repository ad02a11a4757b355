"""Per-request cross-check against an engine's own timings (llama.cpp streams "timings" in its last event)."""

import json

import pandas as pd
import pytest

from workloads.records import RECORD_COLUMNS, build_record
from workloads.sse import parse_stream
from workloads.summary import SummaryOptions, summarise


def _stream(timings: dict | None) -> bytes:
    evs = [{"id": "r1", "choices": [{"delta": {"content": w}}]} for w in ("a", "b", "c")]
    last = {"id": "r1", "choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    if timings is not None:
        last["timings"] = timings
    evs.append(last)
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in evs) + b"data: [DONE]\n\n"


def _record(body: bytes, first_tok_ns: int = 250_000_000):
    ends = [len(body)]
    p = parse_stream(body, ends, [first_tok_ns], chat=True)
    raw = {"parse": p, "sent_ns": 0, "first_byte_ns": first_tok_ns, "last_byte_ns": first_tok_ns, "ended_ns": first_tok_ns,
           "status": 200, "error_class": "ok", "error_detail": None, "body_bytes": len(body)}
    item = {"request_index": 0, "session_id": 0, "turn": 0, "api": "chat", "prompt_tokens_target": 7, "max_tokens": 3}
    return build_record(item, raw, t0_ns=0, intended_abs_ns=0, worker_index=0)


def test_llama_cpp_timings_are_kept_and_compared():
    rec = _record(_stream({"prompt_n": 7, "prompt_ms": 200.0, "predicted_n": 3, "predicted_ms": 30.0}))
    assert set(RECORD_COLUMNS) == set(rec)
    assert rec["engine_prompt_ms"] == 200.0 and rec["engine_predicted_n"] == 3
    # client TTFT 250 ms − engine prompt time 200 ms = 50 ms of queueing, network and client
    assert rec["ttft_minus_engine_prompt_s"] == pytest.approx(0.050)
    assert rec["engine_output_tokens_diff"] == 0


def test_streams_without_timings_leave_the_columns_empty():
    rec = _record(_stream(None))
    assert rec["engine_prompt_ms"] is None and rec["ttft_minus_engine_prompt_s"] is None
    assert rec["engine_output_tokens_diff"] is None


def test_summary_reports_the_cross_check():
    recs = [_record(_stream({"prompt_n": 7, "prompt_ms": 100.0 + i, "predicted_n": 3 + (i == 4), "predicted_ms": 30.0}),
                    first_tok_ns=(150 + i) * 1_000_000) for i in range(5)]
    for i, r in enumerate(recs):
        r["intended_ns"] = r["sent_ns"] = i * 10_000_000
    df = pd.DataFrame(recs)
    s = summarise(df, span_s=1.0, options=SummaryOptions(warmup_s=0.0, cooldown_s=0.0))
    cc = s.engine_crosscheck
    assert cc.requests == 5
    assert cc.output_tokens_diff_nonzero == 1 and cc.output_tokens_diff_max_abs == 1
    assert cc.ttft_minus_engine_prompt_s.p50 == pytest.approx(0.050, abs=1e-9)  # (150+i) ms − (100+i) ms
    assert summarise(pd.DataFrame([_record(_stream(None))]), span_s=1.0).engine_crosscheck is None
