"""BurstGPT and Azure LLM inference CSV traces: the committed samples parse, window, scale and rate cap, bad files named."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from harness.errors import HarnessError
from workloads.mixes import trace_replay
from workloads.mooncake import SAMPLE_TRACE
from workloads.schedule import constant
from workloads.trace_csv import read_csv_trace
from workloads.traces import TraceSelection, detect_format, parse_window, read_selected
from workloads.workload_spec import WorkloadSpec, build_workload

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
BURST = DATA / "burstgpt_sample.csv"
AZ23 = DATA / "azure_2023_code_sample.csv"
AZ24 = DATA / "azure_2024_conv_sample.csv"


def _lines(p):
    return p.read_text().splitlines()


def test_burstgpt_sample_reads_its_columns_and_skips_failed_rows():
    t = read_csv_trace(BURST)
    rows = [ln.split(",") for ln in _lines(BURST)[1:]]
    ok = [r for r in rows if int(r[3]) > 0]
    assert t.format == "burstgpt" and t.rows_read == 48 and len(t.requests) == len(ok) == 46
    assert t.skipped_no_output == 2 and "2 rows with 0 output tokens skipped" in t.notes()[0]
    first = float(rows[0][0])
    assert [r.timestamp_s for r in t.requests] == [float(r[0]) - first for r in ok]
    assert [(r.input_length, r.output_length) for r in t.requests] == [(int(r[2]), int(r[3])) for r in ok]


@pytest.mark.parametrize("path", [AZ23, AZ24])
def test_azure_samples_of_both_years_read_their_timestamps(path):
    from datetime import datetime, timezone

    t = read_csv_trace(path)
    rows = [ln.split(",") for ln in _lines(path)[1:]]
    assert t.format == "azure" and len(t.requests) == 60

    def sec(s):  # 2023: 7 fractional digits, no zone; 2024: +00:00, the fraction omitted when zero
        s = s.replace("+00:00", "")
        whole, _, frac = s.partition(".")
        d = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        return d + (int(frac) / 10 ** len(frac) if frac else 0.0)

    want = [sec(r[0]) - sec(rows[0][0]) for r in rows]
    assert np.allclose([r.timestamp_s for r in t.requests], want, atol=1e-6)
    assert [r.input_length for r in t.requests] == [int(r[1]) for r in rows]
    assert t.first_timestamp == rows[0][0]


def test_format_detection():
    assert detect_format(BURST) == "burstgpt" and detect_format(AZ23) == "azure" and detect_format(AZ24) == "azure"
    assert detect_format(SAMPLE_TRACE) == "mooncake"


def test_window_scale_and_rate_cap():
    full = read_selected(BURST)
    assert full.intended_s[0] == 0.0 and full.effective_time_scale == 1.0 and not full.rate_capped
    w = read_selected(BURST, selection=TraceSelection(window_s=(20.0, 100.0)))
    assert all(20.0 <= r.timestamp_s <= 100.0 for r in w.requests)
    assert len(w.requests) == sum(20.0 <= r.timestamp_s <= 100.0 for r in full.requests)
    half = read_selected(BURST, selection=TraceSelection(window_s=(20.0, 100.0), time_scale=0.5))
    assert np.allclose(half.intended_s, w.intended_s * 0.5)
    mean = (len(half.intended_s) - 1) / half.intended_s[-1]
    capped = read_selected(BURST, selection=TraceSelection(window_s=(20.0, 100.0), time_scale=0.5, max_rate_per_s=mean / 2))
    assert capped.rate_capped and capped.effective_time_scale == pytest.approx(1.0)
    assert np.allclose(capped.intended_s, w.intended_s)  # slowed down uniformly: the burst shape kept
    assert capped.meta["replay_mean_rate_per_s"] == pytest.approx(mean / 2)
    loose = read_selected(BURST, selection=TraceSelection(time_scale=0.5, max_rate_per_s=1e3))
    assert not loose.rate_capped  # a cap above the replay's rate changes nothing


def test_window_reading_stops_early_on_a_time_ordered_file(tmp_path):
    p = tmp_path / "big.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [f"2024-05-10 00:{i // 60:02d}:{i % 60:02d}.5+00:00,10,2" for i in range(3000)]
    p.write_text("\n".join(rows) + "\n")
    import workloads.trace_csv as tc

    old = tc.CHUNK_ROWS
    tc.CHUNK_ROWS = 500
    try:
        t = read_csv_trace(p, until_s=100.0)
    finally:
        tc.CHUNK_ROWS = old
    assert t.stopped_early and t.rows_read == 500 and len(t.requests) == 101


@pytest.mark.parametrize("text,msg", [
    ("Timestamp,Model,Request tokens,Total tokens,Log Type\n1,ChatGPT,5,9,API log\n",
     r"missing column\(s\) 'Response tokens'; its header has .*A burstgpt trace starts with: Timestamp,Model,Request tokens"),
    ("TIMESTAMP,ContextTokens\n2024-05-10 00:00:00+00:00,5\n", r"missing column\(s\) 'GeneratedTokens'"),
    ("when,prompt,reply\n1,2,3\n", r"is not a known CSV trace; give BurstGPT \(Timestamp,Model"),
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,5,3,8,API log\n2,ChatGPT,five,3,8,API log\n",
     r"t.csv:3: Request tokens must be an integer token count >= 0, got 'five'"),
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n-4,ChatGPT,5,3,8,API log\n",
     r"t.csv:2: Timestamp must be a number of seconds >= 0, got '-4'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,5,1\nyesterday,5,1\n",
     r"t.csv:3: TIMESTAMP must be a date and time such as 2023-11-16"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,5,1.5\n", r"t.csv:2: GeneratedTokens must be an integer"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,99999999999,1\n", r"ContextTokens = 99999999999 tokens is above"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,5,0\n", r"has no requests; all 1 rows had 0 input or output"),
    ("", "is empty; give a CSV trace with its header line"),
])
def test_bad_csv_traces_are_named(tmp_path, text, msg):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(HarnessError, match=msg):
        read_selected(p)


def test_compressed_csv_and_a_window_without_requests(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(gzip.compress(BURST.read_bytes()))
    with pytest.raises(HarnessError, match="not UTF-8 text .*decompress it first"):
        read_selected(p)
    with pytest.raises(HarnessError, match=r"--trace-window 9000: holds no request of .*arrive from 0 to"):
        read_selected(BURST, selection=TraceSelection(window_s=(9000.0, None)))


@pytest.mark.parametrize("text,msg", [("5", "a colon"), ("a:b", "START:END in seconds"), ("10:5", "END above START"),
                                      ("-1:5", "START must be >= 0")])
def test_bad_windows_are_refused(text, msg):
    with pytest.raises(HarnessError, match=msg):
        parse_window(text)
    assert parse_window("30:") == (30.0, None) and parse_window(None) is None


def test_trace_replay_artifact_and_spec_flags(tmp_path):
    art = trace_replay(str(AZ24), selection=TraceSelection(time_scale=2.0, window_s=(1.0, 10.0)), seed=3)
    sel = read_selected(AZ24, selection=TraceSelection(time_scale=2.0, window_s=(1.0, 10.0)))
    assert art.name == "azure" and art.count == len(sel.requests)
    assert [r["intended_s"] for r in art.rows] == pytest.approx(list(sel.intended_s))
    assert all(len(r["prompt"].split()) == r["prompt_tokens_target"] for r in art.rows)
    assert art.meta["trace_format"] == "azure" and art.meta["trace_window_s"] == [1.0, 10.0] and art.meta["time_scale"] == 2.0
    spec = WorkloadSpec(trace=str(BURST), trace_window_s=(0.0, 60.0), trace_max_rate_per_s=0.1)
    built = build_workload(spec, constant(1.0, 1.0), api="completions")
    assert built.name == "burstgpt" and built.meta["workload_spec"]["trace_max_rate_per_s"] == 0.1
    assert built.meta["rate_capped"] is True and {r["api"] for r in built.rows} == {"completions"}
    with pytest.raises(HarnessError, match="qualify --trace PATH"):
        WorkloadSpec(trace_window_s=(0.0, 5.0))
    with pytest.raises(HarnessError, match="--trace-max-rate must be a number"):
        WorkloadSpec(trace=str(BURST), trace_max_rate_per_s=-1.0)
    with pytest.raises(HarnessError, match="--trace-format 'csv' is unknown"):
        read_selected(BURST, "csv")
