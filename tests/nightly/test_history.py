"""history: a parquet dataset partitioned by machine and date, appended once per run, queryable with pandas."""

import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.nightly.history import HISTORY_VERSION, append_history, contains_run, load_history

ROWS = [{"constant": "a", "value": 1.0, "unit": "s", "better": "lower", "source": "micro", "n_samples": 5, "low": 0.9, "high": 1.1},
        {"constant": "b", "value": 2e9, "unit": "bytes/s", "better": "higher", "source": "micro", "n_samples": 5,
         "low": 1.9e9, "high": 2.1e9}]


def test_round_trip_partitions_and_filters(tmp_path):
    f1 = append_history(tmp_path, ROWS, machine="m1", run_id="r1", created_unix_s=1.7e9)
    append_history(tmp_path, ROWS, machine="m1", run_id="r2", created_unix_s=1.7e9 + 86400)
    append_history(tmp_path, ROWS, machine="m2", run_id="r3", created_unix_s=1.7e9)
    assert f1 == tmp_path / "machine=m1" / "date=2023-11-14" / "r1.parquet"
    h = load_history(tmp_path)
    assert len(h) == 6 and set(h["machine"]) == {"m1", "m2"} and set(h["date"]) == {"2023-11-14", "2023-11-15"}
    assert (h["schema_version"] == HISTORY_VERSION).all() and "history_version" not in h.columns
    m1 = load_history(tmp_path, machine="m1", constants=["b"])
    assert list(m1["run_id"]) == ["r1", "r2"] and (m1["value"] == 2e9).all()
    assert len(load_history(tmp_path, since_unix_s=1.7e9 + 1)) == 2
    # plain pandas reads the same dataset (hive partitioning)
    df = pd.read_parquet(tmp_path)
    assert len(df) == 6 and {"machine", "date"} <= set(df.columns)
    assert contains_run(tmp_path, "r2") and not contains_run(tmp_path, "r9")


def test_append_once_and_bad_names(tmp_path):
    append_history(tmp_path, ROWS, machine="m1", run_id="r1", created_unix_s=1.7e9)
    with pytest.raises(HarnessError, match="already holds run r1"):
        append_history(tmp_path, ROWS, machine="m1", run_id="r1", created_unix_s=1.7e9)
    with pytest.raises(HarnessError, match="machine 'a/b'"):
        append_history(tmp_path, ROWS, machine="a/b", run_id="r2", created_unix_s=1.7e9)
    assert append_history(tmp_path, [], machine="m1", run_id="r3", created_unix_s=1.7e9) is None


def test_empty_and_newer_history(tmp_path):
    assert len(load_history(tmp_path / "none")) == 0
    df = pd.DataFrame(ROWS)
    df["run_id"], df["created_unix_s"], df["kind"], df["schema_version"] = "r1", 1.7e9, "micro", HISTORY_VERSION + 1
    d = tmp_path / "machine=m1" / "date=2023-11-14"
    d.mkdir(parents=True)
    df.to_parquet(d / "r1.parquet", index=False)
    with pytest.raises(HarnessError, match="newer than this harness understands"):
        load_history(tmp_path)


def test_version_1_files_with_history_version_load_beside_new_ones(tmp_path):
    """Files written before the version column was unified (history_version = 1) still load, mixed with new ones."""
    df = pd.DataFrame(ROWS)
    df["run_id"], df["created_unix_s"], df["kind"], df["history_version"] = "r0", 1.7e9, "micro", 1
    d = tmp_path / "machine=m1" / "date=2023-11-14"
    d.mkdir(parents=True)
    df.to_parquet(d / "r0.parquet", index=False)
    append_history(tmp_path, ROWS, machine="m1", run_id="r1", created_unix_s=1.7e9 + 10)
    h = load_history(tmp_path)
    assert list(h["run_id"]) == ["r0", "r0", "r1", "r1"]
    assert (h["schema_version"] == HISTORY_VERSION).all() and "history_version" not in h.columns
