"""Records: the API key is masked before an error detail is cut; cancelled records keep their instants."""

import pytest

from workloads.records import ERROR_DETAIL_MAX_CHARS, RECORD_COLUMNS, cancelled_record, mask_then_cut
from workloads.clock import estimate_offset

KEY = "sk-live-0123456789abcdefghij"
ITEM = {"request_index": 3, "session_id": 3, "turn": 0, "api": "chat", "intended_s": 1.0, "prompt_tokens_target": 5, "max_tokens": 4}


@pytest.mark.parametrize("start", [ERROR_DETAIL_MAX_CHARS - 12, ERROR_DETAIL_MAX_CHARS - 1, ERROR_DETAIL_MAX_CHARS - len(KEY) + 1])
def test_key_straddling_the_cut_is_not_stored_in_part(start):
    text = "x" * start + KEY + " echoed by the server" + "y" * 500
    out = mask_then_cut(text, KEY)
    assert len(out) <= ERROR_DETAIL_MAX_CHARS
    for n in range(4, len(KEY) + 1):  # not even a 4-character piece of the key's start survives
        assert KEY[:n] not in out
    # the old order (cut, then mask) leaked the key's first characters
    assert KEY[:ERROR_DETAIL_MAX_CHARS - start] in text[:ERROR_DETAIL_MAX_CHARS].replace(KEY, "***")


def test_mask_without_key_only_cuts():
    assert mask_then_cut("a" * 400, None) == "a" * ERROR_DETAIL_MAX_CHARS and mask_then_cut("", KEY) == ""


def test_cancelled_record():
    rec = cancelled_record(ITEM, t0_ns=1_000, intended_abs_ns=2_000, sent_abs_ns=2_500, cancelled_abs_ns=1_002_500, worker_index=1,
                           detail="cancelled: SIGTERM")
    assert set(rec) == set(RECORD_COLUMNS) and rec["error_class"] == "cancelled"
    assert (rec["intended_ns"], rec["sent_ns"], rec["e2e_s"]) == (1_000, 1_500, 1e-3)
    assert rec["schedule_lag_s"] == 5e-7


def test_clock_offset_takes_the_fastest_round_trip():
    # master clock 5 ms ahead; the second sample has the shortest round trip
    samples = [(0, 5_000_000 + 400, 1_000), (10_000, 5_010_050, 10_100), (20_000, 5_020_900, 22_000)]
    c = estimate_offset(samples)
    assert c.rtt_ns == 100 and c.offset_ns == 5_000_000 and c.samples == 3


def test_every_error_class_is_documented():
    """ERROR_CLASSES is the one list of classes a request record can carry; docs/loadgen.md explains each."""
    from pathlib import Path

    from workloads.stream_client import ERROR_CLASSES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "loadgen.md").read_text()
    row = next(ln for ln in doc.splitlines() if ln.startswith("| `status`, `error_class`"))
    assert [c for c in ERROR_CLASSES if f"`{c}`" not in row] == []


def test_every_record_column_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "loadgen.md").read_text()
    table = doc[doc.index("## Records"):doc.index("### Metric names in other tools")]
    missing = [c for c in RECORD_COLUMNS if f"`{c}`" not in table]
    assert not missing, f"columns of the requests table not documented in docs/loadgen.md: {missing}"
