"""The GPU calibration database (calibration/gpus/): filing, the round trip, `pick`, the uncalibrated label, bad entries."""

import json
from dataclasses import replace
from datetime import date

import pytest

from harness.calibration import gpu_db
from harness.calibration.calibrate import calibrate
from harness.calibration.file import SCHEMA_VERSION, load_calibration, save_calibration
from harness.calibration.record import Provenance
from harness.cli import main
from harness.errors import HarnessError
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "data" / "runs"


@pytest.fixture(scope="module")
def filed(tmp_path_factory):
    """The synthetic H200 runs filed into an empty database, the way `harness calibrate RUNS --into-db DIR` files them."""
    db = tmp_path_factory.mktemp("db")
    rec, path = calibrate(FIXTURES / "synthetic-h200", n_bootstrap=20, into_db=True, db_dir=db,
                          command="harness calibrate tests/data/runs/synthetic-h200 --into-db")
    return db, rec, path


def test_filing_writes_the_entry_under_its_gpu_and_family_with_provenance(filed):
    db, rec, path = filed
    assert path == db / "h200-sxm" / "cuda.json"
    d = json.loads(path.read_text())
    assert d["format"] == "harness-calibration" and d["schema_version"] == SCHEMA_VERSION
    p = d["provenance"]
    assert p["source_kind"] == "synthetic" and p["gpu"] == "h200-sxm" and p["family"] == "cuda"
    assert p["device_name"] == "NVIDIA H200" and p["driver"] == "550.00-synthetic"
    assert sorted(p["run_ids"]) == sorted(r.run_id for r in rec.runs) and len(p["run_ids"]) == 2
    assert p["command"].endswith("harness calibrate tests/data/runs/synthetic-h200 --into-db")
    assert date.fromisoformat(p["measured_date"]) <= date.fromisoformat(p["filed_date"])


def test_round_trip_and_pick(filed):
    db, rec, path = filed
    assert load_calibration(path) == rec
    e = gpu_db.pick("h200-sxm", db_dir=db)
    assert e is not None and e.path == path and e.record == rec and e.family == "cuda" and e.gpu == "h200-sxm"
    assert e.provenance == rec.provenance
    # the constants in the form the model consumes: the measured curve at the chapter's batch
    eff = e.constants.efficiency("h200-sxm", 32, 8192, "bf16", decode_context_tokens=8704)
    assert eff is not None and eff.bandwidth == pytest.approx(0.33 + 0.32 * 31 / 63, abs=0.03)
    assert eff.compute == pytest.approx(0.62, abs=0.03)


def test_age_and_describe(filed):
    db, rec, _ = filed
    day = date.fromisoformat(rec.provenance.date)
    e = gpu_db.pick("h200-sxm", db_dir=db, today=day.replace(year=day.year + 1))
    assert e.age_days in (365, 366)
    text = e.describe()
    assert text.startswith(str(db / "h200-sxm" / "cuda.json") + ", synthetic (harness.calibration.synthetic")
    assert text.endswith(f"), {rec.provenance.date}, {e.age_days} days old")
    assert gpu_db.pick("h200-sxm", db_dir=db, today=day).describe().endswith(", 0 days old")


def _refile(db, rec, family, when, kind="our microbenchmarks"):
    prov = replace(rec.provenance, family=family, measured_date=when, filed_date=when, source_kind=kind)
    return gpu_db.file_entry(replace(rec, provenance=prov), db_dir=db)


def test_pick_prefers_the_family_then_the_newest(tmp_path, filed):
    _, rec, _ = filed
    _refile(tmp_path, rec, "aic-trtllm-1.3.0rc20", "2026-11-01", "imported kernel data")
    _refile(tmp_path, rec, "aic-vllm-0.24.0", "2026-11-02", "imported kernel data")
    _refile(tmp_path, rec, "cuda", "2026-10-01")
    assert gpu_db.pick("h200-sxm", db_dir=tmp_path).family == "aic-vllm-0.24.0"  # newest
    assert gpu_db.pick("h200-sxm", "aic-trtllm", db_dir=tmp_path).family == "aic-trtllm-1.3.0rc20"  # prefix
    assert gpu_db.pick("h200-sxm", "cuda", db_dir=tmp_path).family == "cuda"  # exact, though older
    other = gpu_db.pick("h200-sxm", "aic-sglang", db_dir=tmp_path)
    assert other.family == "aic-vllm-0.24.0" and "no aic-sglang entry for h200-sxm" in other.describe()
    # on one date our own measurement comes before imported data
    _refile(tmp_path, rec, "cuda", "2026-11-02")
    assert gpu_db.pick("h200-sxm", db_dir=tmp_path).family == "cuda"
    assert [e.family for e in gpu_db.entries("h200-sxm", db_dir=tmp_path)] == [
        "cuda", "aic-vllm-0.24.0", "aic-trtllm-1.3.0rc20"]


def test_an_older_run_does_not_overwrite_a_newer_entry(tmp_path, filed):
    _, rec, _ = filed
    _refile(tmp_path, rec, "cuda", "2026-11-02")
    with pytest.raises(HarnessError, match=r"holds constants from 2026-11-02, newer than these \(2026-10-01\).*--replace"):
        _refile(tmp_path, rec, "cuda", "2026-10-01")
    prov = replace(rec.provenance, measured_date="2026-10-01", filed_date="2026-10-01")
    gpu_db.file_entry(replace(rec, provenance=prov), db_dir=tmp_path, replace_newer=True)
    assert gpu_db.pick("h200-sxm", db_dir=tmp_path).date == "2026-10-01"


def test_no_entry_is_none_and_the_uncalibrated_label(tmp_path):
    assert gpu_db.pick("h100-sxm", db_dir=tmp_path) is None
    label = gpu_db.uncalibrated_label("h100-sxm", db_dir=tmp_path)
    assert label.startswith("uncalibrated: h100-sxm datasheet peaks at the chapter's default 50% efficiency")
    assert str(tmp_path / "h100-sxm") in label


def test_unknown_gpu_is_an_error_naming_the_catalog(tmp_path):
    with pytest.raises(HarnessError, match=r"h100.*h200-sxm"):
        gpu_db.pick("h100", db_dir=tmp_path)


def test_a_damaged_entry_is_a_clear_error(tmp_path, filed):
    _, _, path = filed
    d = tmp_path / "h200-sxm"
    d.mkdir()
    (d / "cuda.json").write_text(path.read_text()[:500])
    with pytest.raises(HarnessError, match=r"entry .*h200-sxm/cuda.json cannot be used: .*not valid JSON.*restore it"):
        gpu_db.pick("h200-sxm", db_dir=tmp_path)
    body = json.loads(path.read_text())
    body["curves"][0]["points"][0]["fitted"] = 1.7
    (d / "cuda.json").write_text(json.dumps(body))
    with pytest.raises(HarnessError, match=r"(?s)impossible values.*1\.7 is outside \(0, 1\]"):
        gpu_db.pick("h200-sxm", db_dir=tmp_path)


def test_an_entry_without_provenance_or_filed_elsewhere_is_refused(tmp_path, filed):
    _, rec, _ = filed
    d = tmp_path / "h200-sxm"
    save_calibration(replace(rec, provenance=None), d / "cuda.json")
    with pytest.raises(HarnessError, match="has no provenance"):
        gpu_db.pick("h200-sxm", db_dir=tmp_path)
    save_calibration(rec, d / "cuda.json")
    (d / "cuda.json").rename(d / "other.json")
    with pytest.raises(HarnessError, match=r"filed as h200-sxm/other but its provenance says h200-sxm/cuda"):
        gpu_db.pick("h200-sxm", db_dir=tmp_path)


def test_a_newer_schema_is_refused(tmp_path, filed):
    _, _, path = filed
    body = json.loads(path.read_text())
    body["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "h200-sxm").mkdir()
    (tmp_path / "h200-sxm" / "cuda.json").write_text(json.dumps(body))
    with pytest.raises(HarnessError, match=rf"schema_version {SCHEMA_VERSION + 1} is newer than this harness understands \({SCHEMA_VERSION}\); "
                       r"upgrade the harness\.$"):
        gpu_db.pick("h200-sxm", db_dir=tmp_path)


def test_bad_provenance_fields_name_the_field(tmp_path, filed):
    _, _, path = filed
    body = json.loads(path.read_text())
    body["provenance"]["filed_date"] = "yesterday"
    (tmp_path / "h200-sxm").mkdir()
    (tmp_path / "h200-sxm" / "cuda.json").write_text(json.dumps(body))
    with pytest.raises(HarnessError, match=r"provenance: filed_date must be an ISO date \(YYYY-MM-DD\), got 'yesterday'"):
        gpu_db.pick("h200-sxm", db_dir=tmp_path)
    with pytest.raises(HarnessError, match="source_kind must be one of"):
        Provenance("guessed", "x", "h200-sxm", "cuda", "2026-01-01", "cmd")


def test_cpu_runs_are_not_filed(tmp_path):
    with pytest.raises(HarnessError, match="measured no GPU.*GPU calibrations only"):
        calibrate(FIXTURES / "synthetic-cpu", n_bootstrap=20, into_db=True, db_dir=tmp_path)


def test_cli_into_db_and_list(tmp_path, capsys):
    assert main(["calibrate", str(FIXTURES / "synthetic-h200"), "--into-db", str(tmp_path), "--bootstrap", "20"]) == 0
    out = capsys.readouterr().out
    assert f"filed into the GPU calibration database: {tmp_path / 'h200-sxm' / 'cuda.json'}, synthetic" in out
    assert main(["calibrate", "--list-db", str(tmp_path)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("h200-sxm       cuda ") and "days old [2 curves, 2 links]" in line
    assert main(["calibrate", "--list-db", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["gpu"] == "h200-sxm" and rows[0]["family"] == "cuda" and rows[0]["date"] == "2023-11-14"
    assert main(["calibrate", str(FIXTURES / "synthetic-h200"), "--into-db", str(tmp_path), "--out", "x.json"]) == 1
    assert "leave out --out" in capsys.readouterr().err


def test_synthetic_runs_never_enter_the_shipped_database(filed, monkeypatch):
    _, rec, _ = filed
    assert rec.provenance.source_kind == "synthetic"
    monkeypatch.delenv(gpu_db.DB_ENV, raising=False)
    with pytest.raises(HarnessError, match="synthetic .*takes measurements only"):
        gpu_db.file_entry(rec)
    assert not (gpu_db.DEFAULT_DB_DIR / "h200-sxm" / "cuda.json").exists()


def _device_tarball(tmp_path):
    """A device-check tarball (results/<machine>/<run_id>/ inside) holding the synthetic H200 runs."""
    import tarfile

    tar = tmp_path / "run.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(FIXTURES / "synthetic-h200", arcname="results/synthetic-h200")
    return tar


def test_import_device_files_its_runs_into_the_database(tmp_path, capsys):
    tar = _device_tarball(tmp_path)
    code = main(["micro", "import-device", str(tar), "--out", str(tmp_path / "r"), "--into-db", str(tmp_path / "db"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["runs"]) == 2 and all(d["filed"] for d in out["database"])
    assert gpu_db.pick("h200-sxm", db_dir=tmp_path / "db").family == "cuda"


def test_a_device_check_output_folder_is_filed_into_the_database_by_one_command(tmp_path, capsys):
    """The folder a device check returns ($OUT, holding run.tar.gz) goes into results/ and the database in one call."""
    out_dir = tmp_path / "device-out"
    out_dir.mkdir()
    _device_tarball(tmp_path).rename(out_dir / "run.tar.gz")
    code = main(["micro", "import-device", str(out_dir), "--out", str(tmp_path / "r"), "--into-db", str(tmp_path / "db")])
    out = capsys.readouterr().out
    assert code == 0 and out.count("filed ") == 2
    assert f"into the GPU calibration database: {tmp_path / 'db' / 'h200-sxm' / 'cuda.json'}" in out
    e = gpu_db.pick("h200-sxm", db_dir=tmp_path / "db")
    # each run is fitted and filed on its own (the later one of a GPU and family is the entry)
    assert e.family == "cuda" and set(e.provenance.run_ids) <= {p.name for p in (tmp_path / "r").glob("*/*")}


def test_import_device_keeps_the_run_when_it_cannot_be_filed(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(gpu_db.DB_ENV, raising=False)
    code = main(["micro", "import-device", str(_device_tarball(tmp_path)), "--out", str(tmp_path / "r")])
    cap = capsys.readouterr()
    assert code == 0 and cap.out.count("filed ") == 2
    assert "not filed into the GPU calibration database: these runs are synthetic" in cap.err
    assert "harness calibrate" in cap.err and "--into-db" in cap.err
    code = main(["micro", "import-device", str(_device_tarball(tmp_path)), "--out", str(tmp_path / "r2"), "--no-db"])
    assert code == 0 and capsys.readouterr().err == ""


def test_the_shipped_database_loads_and_says_where_it_came_from(monkeypatch):
    """Every committed entry parses, sits under its own GPU and family, and names its source; h200-sxm has one per
    engine aiconfigurator measured (issue 46: at least h200-sxm, h100-sxm, a100-80gb-sxm)."""
    monkeypatch.delenv(gpu_db.DB_ENV, raising=False)
    found = gpu_db.entries()
    assert {e.gpu for e in found} >= {"h200-sxm", "h100-sxm", "a100-80gb-sxm"}
    for e in found:
        assert e.provenance.source_kind == "imported kernel data" and e.provenance.source == "aiconfigurator 0.12.0"
        assert e.provenance.reference_model == "qwen3-8b" and e.path.stat().st_size < gpu_db.ENTRY_SIZE_WARN_BYTES
    assert sorted(e.family.split("-")[1] for e in found if e.gpu == "h200-sxm") == ["sglang", "trtllm", "vllm"]
    e = gpu_db.pick("h200-sxm", "aic-vllm")
    assert e.describe().startswith("calibration/gpus/h200-sxm/aic-vllm-0.24.0.json, imported kernel data "
                                   "(aiconfigurator 0.12.0), ")
    eff = e.constants.efficiency("h200-sxm", 32, 8192, "bf16", decode_context_tokens=8192)
    assert 0.5 < eff.compute < 0.95 and 0.5 < eff.bandwidth < 0.95
    assert e.constants.collective("all_reduce", 8, "nccl").time_s(1 << 20) > 0
