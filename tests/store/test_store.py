"""The results store: round trip, never overwrite, upgrade a frozen v1 run, refuse newer files."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.records import SCHEMA_VERSION, TABLE_COLUMNS, new_manifest, validate_table
from harness.store import Run, RunWriter, iter_runs

V1 = Path(__file__).parents[1] / "data" / "store" / "v1"
V1_RUN = V1 / "cpu--intel-r-xeon-r-processor" / "20261101T120000Z-micro-v1fix"


def test_round_trip(tmp_path):
    m = new_manifest("micro", seeds={"numpy": 3}, command_line=["harness", "micro", "run"])
    with RunWriter(m, tmp_path) as w:
        w.append("things", [{"x_s": 1.5, "name": "a"}, {"x_s": 2.5, "name": "b"}])
        w.append("things", [{"x_s": 3.5, "name": "c"}])
    run = Run(w.path)
    assert run.manifest.status == "complete" and run.manifest.seeds == {"numpy": 3}
    assert run.manifest.schema_version == SCHEMA_VERSION == 2
    assert run.manifest.cpu_cores_available >= 1 and run.manifest.harness_commit is not None
    df = run.table("things")
    assert list(df["x_s"]) == [1.5, 2.5, 3.5] and set(df["schema_version"]) == {SCHEMA_VERSION}
    assert [r.manifest.run_id for r in iter_runs(tmp_path)] == [m.run_id]
    assert not list(w.path.rglob("*.tmp*"))  # temporaries were renamed away


def test_never_overwritten(tmp_path):
    m = new_manifest("micro")
    RunWriter(m, tmp_path)
    with pytest.raises(HarnessError, match="never overwritten"):
        RunWriter(m, tmp_path)


def test_failed_run_is_marked(tmp_path):
    m = new_manifest("micro")
    with pytest.raises(RuntimeError):
        with RunWriter(m, tmp_path) as w:
            raise RuntimeError("boom")
    assert Run(w.path).manifest.status == "failed"


def test_v1_fixture_is_upgraded_on_load():
    run = Run(V1_RUN)
    assert run.manifest.schema_version == SCHEMA_VERSION
    assert run.manifest.cpu_cores_available == 2 and run.manifest.telemetry == {}
    assert any("upgraded from schema_version 1" in n for n in run.manifest.notes)
    cases = run.table("micro_cases")
    assert "median_ns" not in cases.columns
    assert cases["median_s"].iloc[0] == pytest.approx(310e-6) and cases["p90_s"].iloc[0] == pytest.approx(352e-6)
    validate_table("micro_cases", cases)
    samples = run.table("micro_samples")
    assert list(samples["time_s"]) == pytest.approx([300e-6, 310e-6, 352e-6])


def test_newer_manifest_refused(tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(V1_RUN, dst)
    raw = json.loads((dst / "manifest.json").read_text())
    raw["schema_version"] = SCHEMA_VERSION + 1
    (dst / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(HarnessError, match="newer than this harness understands.*upgrade the harness"):
        Run(dst)


def test_newer_table_refused(tmp_path):
    m = new_manifest("micro")
    with RunWriter(m, tmp_path) as w:
        w.append("t", [{"a": 1}])
    part = next((w.path / "t").glob("part-*.parquet"))
    df = pd.read_parquet(part)
    df["schema_version"] = SCHEMA_VERSION + 5
    df.to_parquet(part, index=False)
    with pytest.raises(HarnessError, match="newer than this harness"):
        Run(w.path).table("t")


def test_missing_table_and_bad_dir(tmp_path):
    with pytest.raises(HarnessError, match="not a run directory"):
        Run(tmp_path)
    with RunWriter(new_manifest("micro"), tmp_path) as w:
        pass
    with pytest.raises(HarnessError, match="no table 'nope'"):
        Run(w.path).table("nope")


def test_append_validates_known_tables(tmp_path):
    with RunWriter(new_manifest("micro"), tmp_path) as w:
        with pytest.raises(HarnessError, match="lacks column"):
            w.append("micro_samples", [{"case_id": "x", "rep": 0}])
    assert set(TABLE_COLUMNS) >= {"micro_cases", "micro_samples", "micro_skips", "telemetry_nvml"}


def test_unwritable_results_dir_is_an_error_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(HarnessError, match="results directory .*a-file.* cannot be written"):
        RunWriter(new_manifest("micro"), blocker / "results")
