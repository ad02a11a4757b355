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


def test_sidecars_are_versioned_and_old_unversioned_ones_still_load(tmp_path):
    from harness.store import SIDECAR_VERSIONS

    with RunWriter(new_manifest("load"), tmp_path) as w:
        w.write_json("summary.json", {"load": {"n": 1}})
        w.write_json("plan.json", {"pd": 1})
        w.write_json("sweep.json", {"rows": []})
        w.write_json("other.json", {"x": 1})
    run = Run(w.path)
    for name in ("plan.json", "sweep.json"):  # (loop_report.json is versioned by its owner, harness.loop_records.report)
        assert json.loads((w.path / name).read_text())["schema_version"] == SIDECAR_VERSIONS[name]
    assert run.json("plan.json") == {"schema_version": 1, "pd": 1}
    assert run.json("other.json") == {"x": 1} and run.json("summary.json") == {"load": {"n": 1}}  # workloads.summary's
    (w.path / "plan.json").write_text(json.dumps({"pd": 2}))  # written before sidecars had a version
    assert run.json("plan.json") == {"schema_version": 1, "pd": 2}
    (w.path / "plan.json").write_text(json.dumps({"schema_version": 7}))
    with pytest.raises(HarnessError, match="plan.json: schema_version 7 is newer than this harness understands"):
        run.json("plan.json")
    with pytest.raises(FileNotFoundError):
        run.json("absent.json")


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"{\"schema_version\": 2, \"x\": \"\xe9\"}"])
def test_binary_or_non_utf8_manifest_is_a_clear_error(tmp_path, content):
    with RunWriter(new_manifest("micro"), tmp_path) as w:
        pass
    (w.path / "manifest.json").write_bytes(content)
    with pytest.raises(HarnessError, match="manifest.json is not UTF-8 text .*the run is damaged"):
        Run(w.path)


def test_damaged_part_is_named_and_the_rest_is_read_with_a_warning(tmp_path, capsys):
    with RunWriter(new_manifest("load"), tmp_path) as w:
        for i in range(3):
            w.append("things", [{"x_s": float(i)}])
    bad = w.path / "things" / "part-00002.parquet"
    bad.write_bytes(bad.read_bytes()[:40])  # truncated
    run = Run(w.path)
    df = run.table("things")
    err = capsys.readouterr().err
    assert list(df["x_s"]) == [0.0, 2.0]
    assert "warning:" in err and str(bad) in err and "the other 2 of its 3 parts (2 rows) are readable" in err
    assert run.damaged_parts and str(bad) in run.damaged_parts[0]
    with pytest.raises(HarnessError, match="1 damaged part.*part-00002.parquet.*move the damaged part"):
        run.table("things", strict=True)
    for p in (w.path / "things").glob("part-*.parquet"):
        p.write_bytes(b"garbage")
    with pytest.raises(HarnessError, match="none of its 3 parts is readable"):
        Run(w.path).table("things")
