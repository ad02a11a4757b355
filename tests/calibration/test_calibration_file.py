"""The calibration file (versioned JSON) and `harness calibrate`."""

import json

import pytest

from harness.calibration.file import SCHEMA_VERSION, load_calibration, save_calibration
from harness.cli import main
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "data" / "runs"


def test_calibrate_cli_writes_a_readable_versioned_file(tmp_path, capsys):
    out = tmp_path / "cal" / "synthetic-h200.json"
    code = main(["calibrate", str(FIXTURES / "synthetic-h200"), "--out", str(out), "--bootstrap", "50"])
    text = capsys.readouterr().out
    assert code == 0
    assert "decode_bandwidth_efficiency on h200-sxm" in text and "link pcie:h2d:pinned" in text and "C_C" in text
    raw = out.read_text()
    d = json.loads(raw)
    assert d["format"] == "harness-calibration" and d["schema_version"] == SCHEMA_VERSION == 2
    assert "readme" in d and raw.count("\n") > 100  # indented, one field per line
    assert d["machine"] == "synthetic-h200" and len(d["runs"]) == 2
    rec = load_calibration(out)
    assert rec.to_dict() == {k: v for k, v in d.items() if k not in ("format", "schema_version", "readme")}


def test_roundtrip(tmp_path):
    from harness.calibration.fit import fit_calibration
    from harness.calibration.runs import load_machine_runs

    rec = fit_calibration(load_machine_runs(FIXTURES / "synthetic-cpu"), n_bootstrap=20)
    p = save_calibration(rec, tmp_path / "c.json")
    assert load_calibration(p) == rec


def test_version_1_file_with_format_version_still_loads(tmp_path):
    """Files written before the version field was unified (format_version 1) load unchanged."""
    from harness.calibration.fit import fit_calibration
    from harness.calibration.runs import load_machine_runs

    rec = fit_calibration(load_machine_runs(FIXTURES / "synthetic-cpu"), n_bootstrap=20)
    d = json.loads(save_calibration(rec, tmp_path / "c.json").read_text())
    del d["schema_version"]
    d["format_version"] = 1
    old = tmp_path / "old.json"
    old.write_text(json.dumps(d))
    assert load_calibration(old) == rec


def test_newer_version_is_refused(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"format": "harness-calibration", "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(Exception, match="newer than this harness understands.*upgrade the harness"):
        load_calibration(p)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"hello": 1}), "not a calibration file"),
    (json.dumps({"format": "harness-calibration", "format_version": "1"}), "format_version must be an integer"),
    (json.dumps({"format": "harness-calibration", "format_version": 1}), "field 'machine' is missing"),
    (json.dumps({"format": "harness-calibration", "format_version": 0}), "format_version must be an integer >= 1, got 0"),
    (json.dumps({"format": "harness-calibration", "format_version": -1}), "format_version must be an integer >= 1, got -1"),
    (json.dumps({"format": "harness-calibration", "schema_version": 0}), "schema_version must be an integer >= 1, got 0"),
    (json.dumps({"format": "harness-calibration"}), "schema_version is missing"),
])
def test_bad_files_name_the_problem(tmp_path, capsys, content, message):
    p = tmp_path / "c.json"
    p.write_text(content)
    code = main(["model", "plan", str(ROOT / "workloads" / "scenarios" / "ch9-hetero-pd.toml"), "--calibration", str(p)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: ") and message in err and "Traceback" not in err


def test_cli_errors_exit_1_without_traceback(tmp_path, capsys):
    code = main(["calibrate", str(tmp_path / "missing"), "--out", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert code == 1 and "does not exist" in err and "Traceback" not in err
    code = main(["calibrate", str(FIXTURES / "synthetic-cpu"), "--out", str(tmp_path / "c.json"), "--proxy", "a100=cpu"])
    err = capsys.readouterr().err
    assert code == 1 and "'a100' is neither a GPU nor a link" in err
    code = main(["calibrate", str(FIXTURES / "synthetic-cpu"), "--out", str(tmp_path / "c.json"), "--proxy", "h20-96gb=h100-sxm"])
    err = capsys.readouterr().err
    assert code == 1 and "nothing named 'h100-sxm' was measured" in err
    code = main(["calibrate", str(FIXTURES / "synthetic-cpu"), "--out", str(tmp_path / "c.json"), "--bootstrap", "3"])
    assert code == 1 and "--bootstrap must be at least 10" in capsys.readouterr().err
    code = main(["calibrate", str(FIXTURES), "--out", str(tmp_path / "c.json")])
    assert code == 1 and "holds runs of 2 machines" in capsys.readouterr().err
