"""Every part of a stored table has the table's declared schema: a multi-part run with failures reads back as one
table through pandas and pyarrow.dataset; runs written before (types inferred per part) still load through Run.table."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from harness.errors import HarnessError
from harness.records import new_manifest
from harness.store import Run, RunWriter
from harness.table_schemas import TABLE_SCHEMAS, arrow_schema
from workloads.records import RECORD_COLUMNS, missing_record


def _ok(i: int) -> dict:
    rec = {c: None for c in RECORD_COLUMNS}
    rec.update({"request_index": i, "session_id": i, "turn": 0, "worker_index": 0, "api": "chat", "intended_ns": i * 10**8,
                "sent_ns": i * 10**8 + 5, "first_byte_ns": i * 10**8 + 900, "first_token_ns": i * 10**8 + 1000,
                "last_byte_ns": i * 10**8 + 5000, "chunk_ns": [i * 10**8 + 1000, i * 10**8 + 3000], "status": 200,
                "error_class": "ok", "prompt_tokens_target": 64, "max_tokens": 2, "prompt_tokens_usage": 64,
                "output_tokens_usage": 2, "output_tokens_chunks": 2, "token_count_mismatch": False, "usage_missing": False,
                "finish_reason": "length", "response_id": f"r{i}", "ttft_s": 1e-6, "e2e_s": 5e-6, "body_bytes": 300})
    return rec


def _failed(i: int) -> dict:
    item = {"request_index": i, "session_id": i, "turn": 0, "api": "chat", "intended_s": i * 0.1, "prompt_tokens_target": 64,
            "max_tokens": 2}
    rec = missing_record(item, "http_500", worker_index=0, detail="HTTP 500")
    rec.update({"status": 500, "sent_ns": i * 10**8 + 5, "last_byte_ns": i * 10**8 + 200, "e2e_s": 2e-7})
    return rec


def _write_faulty_run(tmp_path, parts) -> Run:
    with RunWriter(new_manifest("load"), tmp_path) as w:
        for rows in parts:
            w.append("requests", rows)
    return Run(w.path)


def test_a_multi_part_run_with_failures_reads_as_one_table(tmp_path):
    # issue 48 item 15: `pandas.read_parquet(RUN/"requests")` failed with "Unsupported cast from double to null": the
    # parts' types were inferred from their rows (first_byte_ns int64 / double, finish_reason string / null)
    run = _write_faulty_run(tmp_path, [[_ok(0), _ok(1)], [_failed(2), _failed(3)], [_ok(4), _failed(5)]])
    whole = pd.read_parquet(run.path / "requests")
    assert len(whole) == 6 and sorted(whole["request_index"]) == list(range(6))
    dataset = ds.dataset(run.path / "requests", format="parquet")
    table = dataset.to_table()
    assert table.num_rows == 6
    want = arrow_schema("requests")
    for frag in dataset.get_fragments():  # every part, even the all-failed one, has the declared types
        assert frag.physical_schema.equals(want, check_metadata=False), frag.path
    assert table.schema.field("first_byte_ns").type == pa.int64() and table.schema.field("finish_reason").type == pa.string()
    assert table.schema.field("prompt_tokens_usage").type == pa.int64() and table.schema.field("chunk_ns").type == pa.list_(pa.int64())
    ok = table.filter(ds.field("error_class") == "ok")
    assert ok.column("first_byte_ns").to_pylist() == [900, 10**8 + 900, 4 * 10**8 + 900]  # exact integers, no float rounding
    assert len(run.table("requests")) == 6


def test_every_declared_table_reads_back_with_its_types_when_a_part_is_all_null(tmp_path):
    with RunWriter(new_manifest("load"), tmp_path) as w:
        w.append("server_metrics", [{"t_s": 0.0, "role": "all", "url": "u", "metric": "m", "value": 1.0, "error": None}])
        w.append("server_metrics", [{"t_s": 1.0, "role": "all", "url": "u", "metric": None, "value": None, "error": "refused"}])
    assert len(pd.read_parquet(w.path / "server_metrics")) == 2
    assert ds.dataset(w.path / "server_metrics").schema.field("value").type == pa.float64()


def test_undeclared_column_and_fractional_count_are_refused_naming_the_column(tmp_path):
    with RunWriter(new_manifest("load"), tmp_path) as w:
        with pytest.raises(HarnessError, match=r"\['bogus_s'\] are not in table 'requests''s declared schema"):
            w.append("requests", [{**_ok(0), "bogus_s": 1.0}])
        with pytest.raises(HarnessError, match="column 'output_tokens_usage' does not fit its declared type int64"):
            w.append("requests", [{**_ok(0), "output_tokens_usage": 2.5}])
    assert not list(w.path.glob("requests/.*.tmp"))


def test_old_runs_with_drifting_parts_still_load_through_the_store(tmp_path):
    # a run written before the declared schemas: each part's types inferred by pandas from its own rows
    with RunWriter(new_manifest("load"), tmp_path) as w:
        pass
    d = w.path / "requests"
    d.mkdir()
    for n, rows in enumerate([[_ok(0), _ok(1)], [_failed(2)]], 1):
        df = pd.DataFrame(rows)
        df["schema_version"], df["run_id"] = 2, w.manifest.run_id
        df.to_parquet(d / f"part-{n:05d}.parquet", index=False)
    types = {n: ds.dataset(d / f"part-{n:05d}.parquet").schema.field("finish_reason").type for n in (1, 2)}
    assert types[1] in (pa.string(), pa.large_string()) and types[2] == pa.null()  # the drift the issue found
    df = Run(w.path).table("requests")
    assert len(df) == 3 and list(df["error_class"]) == ["ok", "ok", "http_500"]


def test_the_requests_schema_is_the_records_columns():
    assert tuple(TABLE_SCHEMAS["requests"]) == RECORD_COLUMNS


def test_every_table_the_harness_writes_is_declared_or_listed_as_not_yet():
    """The tables appended in the code (writer.append("NAME", ...)) against the declarations: a new table must be
    declared; the ones listed here are still written with per-part inferred types (their owners' follow-up)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    written = set()
    for pkg in ("harness", "workloads", "microbench"):
        for f in (root / pkg).rglob("*.py"):
            written |= set(re.findall(r"\b(?:w|writer|self\.writer|self|self\.parts)\.append\(\s*\"([a-z_]+)\"", f.read_text()))
            written |= set(re.findall(r"tables\[\"([a-z_]+)\"\]\s*=", f.read_text()))
    not_yet = {"sweep_points": "one part per sweep", "micro_kernels": "GPU kernel profiles",
               **{t: "harness loop's tables (h45-loop rewrites them)" for t in written if t.startswith("loop_")}}
    assert written - set(TABLE_SCHEMAS) - set(not_yet) == set()
    assert "requests" in written and "server_metrics" in written
