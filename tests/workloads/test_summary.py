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
    assert s.tpot_s.p50 == pytest.approx(0.02, rel=1e-6)
    assert s.itl_s.p50 == pytest.approx(0.02, rel=1e-3)
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
    assert s.ttft_s.max == pytest.approx(0.1)


def _stored_run(tmp_path, rows, *, span_s, options, with_summary=True, status="complete"):
    from dataclasses import asdict

    from harness.records import new_manifest
    from harness.store import RunWriter
    from workloads.summary import summarise_run, summary_document

    m = new_manifest("load", run_id="summary-test", machine="test-machine",
                     extra={"summary_options": asdict(options), "workload": {"schedule": {"span_s": span_s}}})
    w = RunWriter(m, tmp_path)
    w.append("requests", rows[: len(rows) // 2])
    w.append("requests", rows[len(rows) // 2:])
    if with_summary:
        from harness.store import Run

        s = summarise_run(Run(w.path), options=options, span_s=span_s)
        w.write_json("summary.json", summary_document(s, span_s=span_s, options=options))
    w.update_manifest(status=status)
    return w.path


def _mixed_rows():
    rows = [_rec(i, i * 0.25, 0.2 + 0.01 * (i % 7), 0.02, lag_s=0.001 * (i % 3)) for i in range(40)]
    rows[5] = _rec(5, 1.25, 9.0, 0.01, cls="timeout")
    rows[6]["output_tokens_usage"] = None
    rows[6]["usage_missing"] = True
    return rows


def test_summary_from_the_stored_table_equals_the_one_from_records(tmp_path):
    from harness.store import Run
    from workloads.summary import summarise_run

    opts = SummaryOptions(warmup_s=1.0, cooldown_s=0.5, slo_ttft_s=0.25, slo_tpot_s=0.05)
    rows = _mixed_rows()
    in_memory = summarise(pd.DataFrame(rows), span_s=10.0, options=opts).to_dict()
    stored = summarise_run(Run(_stored_run(tmp_path, rows, span_s=10.0, options=opts)), options=opts, span_s=10.0).to_dict()
    assert stored == in_memory
    assert stored["errors_by_class"] == {"ok": 39, "timeout": 1} and stored["usage_missing"] == 1


def test_a_killed_run_is_summarised_from_its_table_with_its_recorded_options(tmp_path):
    from harness.store import Run
    from workloads.summary import read_summary

    opts = SummaryOptions(warmup_s=2.0, slo_ttft_s=0.25)
    rows = _mixed_rows()
    run = Run(_stored_run(tmp_path, rows, span_s=10.0, options=opts, with_summary=False, status="failed"))
    doc = read_summary(run)
    assert doc.derived is True and "status failed" in doc.note and doc.schema_version == 1
    assert doc.span_s == 10.0 and doc.options.warmup_s == 2.0  # from the manifest, not the defaults
    assert doc.load == summarise(pd.DataFrame(rows), span_s=10.0, options=opts)


def test_summary_json_is_versioned_and_a_newer_one_is_refused(tmp_path):
    import json

    from harness.errors import HarnessError
    from harness.store import Run
    from workloads.summary import SUMMARY_SCHEMA_VERSION, read_summary

    path = _stored_run(tmp_path, _mixed_rows(), span_s=10.0, options=SummaryOptions())
    doc = json.loads((path / "summary.json").read_text())
    assert doc["schema_version"] == SUMMARY_SCHEMA_VERSION and doc["derived_from"] == "requests table"
    del doc["schema_version"]  # written before summary.json was versioned: version 1
    (path / "summary.json").write_text(json.dumps(doc))
    assert read_summary(Run(path)).schema_version == 1
    doc["schema_version"] = SUMMARY_SCHEMA_VERSION + 1
    (path / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(HarnessError, match="newer than this harness understands.*upgrade the harness"):
        read_summary(Run(path))
    (path / "summary.json").write_text("{not json")
    with pytest.raises(HarnessError, match="cannot be read.*delete it"):
        read_summary(Run(path))


def test_the_report_renders_a_run_killed_before_its_summary(tmp_path):
    from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run
    from harness.report.bench_pd import render

    path = write_synthetic_load_run(tmp_path / "results", SyntheticLoad(requests=60))
    (path / "summary.json").unlink()
    md = next(p for p in render(path, tmp_path / "report") if p.name == "summary.md").read_text()
    assert "Note: no summary.json (run status complete): summarised from the stored requests table." in md
    # the synthetic manifest records no schedule, so the span falls back to the last intended send (window end exclusive)
    assert "Window 0.0–14.8 s · 60 requests (59 ok of 59 measured)" in md
def test_drain_inclusive_throughput_next_to_the_window():
    # 10 requests, 1 s apart, each taking 5 s: the window [0, 10) holds completions 5..9; the run ends at ~14.1 s
    rows = [_rec(i, float(i), 4.9, 0.01) for i in range(10)]
    s = summarise(pd.DataFrame(rows), span_s=10.0)
    assert s.request_throughput_per_s == pytest.approx(5 / 10.0)
    assert s.run_duration_s == pytest.approx(9 + 0.001 + 4.9 + 0.1, abs=1e-3)
    assert s.request_throughput_incl_drain_per_s == pytest.approx(10 / s.run_duration_s)
    assert s.window_note is None


def test_nothing_completed_in_the_window_says_why():
    rows = [_rec(i, i * 0.5, 20.0, 0.01) for i in range(10)]  # a startup backlog: the first token after 20 s
    s = summarise(pd.DataFrame(rows), span_s=5.0)
    assert s.request_throughput_per_s == 0.0 and "startup backlog" in s.window_note and "20.1 s" in s.window_note
    assert s.request_throughput_incl_drain_per_s > 0


def test_mostly_failed_run_is_invalid():
    rows = [_rec(i, i * 0.1, 0.1, 0.01, cls="connect" if i % 4 else "ok") for i in range(20)]
    s = summarise(pd.DataFrame(rows), span_s=2.0)
    assert not s.valid and s.error_fraction == pytest.approx(0.75)
    assert any("15 of 20 sent requests failed (75%" in r and "connect 15" in r for r in s.invalid_reasons)
    ok = summarise(pd.DataFrame(rows[:8]), span_s=2.0, options=SummaryOptions(max_error_fraction=0.9))
    assert not any("failed" in r for r in ok.invalid_reasons)


def test_empty_window_is_invalid():
    rows = [_rec(i, float(i), 0.1, 0.01) for i in range(2)]
    s = summarise(pd.DataFrame(rows), span_s=2.0, options=SummaryOptions(warmup_s=100.0))
    assert not s.valid and "window" in s.invalid_reasons[0] and "empty" in s.invalid_reasons[0]


def test_closed_loop_ignores_the_unused_pool():
    rows = [_rec(i, i * 0.1, 0.1, 0.01) for i in range(5)]
    rows += [{**_rec(5 + i, 0.0, 0.1, 0.01, cls="not_sent"), "intended_ns": None, "sent_ns": None, "chunk_ns": []} for i in range(5)]
    s = summarise(pd.DataFrame(rows), span_s=1.0, options=SummaryOptions(closed_loop=True))
    assert s.valid and s.load_mode == "closed-loop"


def test_percentiles_are_typed_and_stored_in_the_old_shape(tmp_path):
    import json

    from harness.served import Percentiles
    from harness.store import Run
    from workloads.summary import LoadSummary, read_summary

    opts = SummaryOptions(slo_ttft_s=0.25)
    path = _stored_run(tmp_path, _mixed_rows(), span_s=10.0, options=opts)
    s = read_summary(Run(path)).load
    assert isinstance(s.ttft_s, Percentiles) and isinstance(s.schedule_lag_s, Percentiles) and s.ttft_s.count == 39
    stored = json.loads((path / "summary.json").read_text())["load"]
    for name in ("ttft_s", "ttft_from_intended_s", "tpot_s", "itl_s", "e2e_s", "e2e_from_intended_s", "schedule_lag_s"):
        assert list(stored[name]) == ["count", "mean", "p50", "p90", "p99", "max"], name  # the dicts of every earlier version
    assert LoadSummary.from_dict(stored) == s and LoadSummary.from_dict(s.to_dict()) == s


def test_a_summary_written_before_the_later_fields_still_reads(tmp_path):
    """summary.json as the first versions wrote it: no schema_version, none of the fields added since (drain-inclusive
    figures, load mode, error fraction, engine cross-check ...)."""
    import json

    from harness.errors import HarnessError
    from harness.store import Run
    from workloads.summary import read_summary

    path = _stored_run(tmp_path, _mixed_rows(), span_s=10.0, options=SummaryOptions())
    p = {"count": 3, "mean": 0.2, "p50": 0.2, "p90": 0.3, "p99": 0.3, "max": 0.3}
    old = {"window_start_s": 0.0, "window_end_s": 10.0, "requests_total": 3, "requests_measured": 3, "requests_ok": 3,
           "errors_by_class": {"ok": 3}, "request_throughput_per_s": 0.3, "output_tokens_per_s": 3.0,
           "output_tokens_per_s_usage": 3.0, "ttft_s": p, "ttft_from_intended_s": p, "tpot_s": p, "itl_s": p, "e2e_s": p,
           "e2e_from_intended_s": p, "goodput_per_s": None, "goodput_fraction": None, "slo": {}, "schedule_lag_s": p,
           "intended_rate_per_s": 0.3, "achieved_send_rate_per_s": 0.3, "token_count_mismatches": 0, "usage_missing": 0}
    (path / "summary.json").write_text(json.dumps({"load": old, "span_s": 10.0}))
    doc = read_summary(Run(path))
    assert doc.schema_version == 1 and doc.load.ttft_s.p90 == 0.3 and doc.load.load_mode == "open-loop"
    assert doc.load.engine_crosscheck is None and doc.load.run_duration_s == 0.0
    del old["ttft_s"]
    (path / "summary.json").write_text(json.dumps({"load": old, "span_s": 10.0}))
    with pytest.raises(HarnessError, match="load summary field 'ttft_s' is missing.*delete the file"):
        read_summary(Run(path))
