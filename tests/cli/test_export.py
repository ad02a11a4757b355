"""`harness export RUN --csv|--jsonl`: every row and column comes back through the documented pandas recipe."""

import io
import json

import pandas as pd
import pytest

from harness.cli import main
from harness.export import export_run
from harness.records import new_manifest
from harness.store import Run, RunWriter

ROWS = [{"request_index": i, "error_class": "ok" if i else "timeout", "ttft_s": None if i == 0 else 0.1 * i,
         "chunk_ns": [10 * i, 10 * i + 5] if i else []} for i in range(4)]


@pytest.fixture
def run_dir(tmp_path):
    with RunWriter(new_manifest("load", run_id="export-test"), tmp_path / "results") as w:
        w.append("requests", ROWS)
    return w.path


def _check(df):
    assert df["request_index"].tolist() == [0, 1, 2, 3]
    assert df["chunk_ns"].tolist() == [r["chunk_ns"] for r in ROWS]
    assert pd.isna(df["ttft_s"][0]) and df["ttft_s"][2] == pytest.approx(0.2)


def test_csv_round_trip_with_the_documented_recipe(run_dir, tmp_path):
    out = tmp_path / "requests.csv"
    assert main(["export", str(run_dir), "--csv", "--out", str(out)]) == 0
    df = pd.read_csv(out, converters={"chunk_ns": json.loads})  # the recipe in docs/loadgen.md
    _check(df)
    assert set(Run(run_dir).table("requests").columns) == set(df.columns)


def test_jsonl_to_stdout(run_dir):
    buf = io.StringIO()
    export_run(run_dir, "jsonl", stream=buf)
    _check(pd.read_json(io.StringIO(buf.getvalue()), lines=True))


def test_unknown_table_is_named(run_dir, capsys):
    assert main(["export", str(run_dir), "--jsonl", "--table", "nope"]) == 1
    assert "has no table nope; it has: requests" in capsys.readouterr().err
