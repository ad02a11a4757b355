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
    assert d["format"] == "harness-calibration" and d["schema_version"] == SCHEMA_VERSION == 4
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


def _saved(tmp_path, name="synthetic-h200"):
    from harness.calibration.fit import fit_calibration
    from harness.calibration.runs import load_machine_runs

    rec = fit_calibration(load_machine_runs(FIXTURES / name), n_bootstrap=20)
    return json.loads(save_calibration(rec, tmp_path / "c.json").read_text())


@pytest.mark.parametrize("field, value", [("fitted", -0.2), ("fitted", 1.7), ("fitted", 0.0)])
def test_efficiencies_outside_0_1_are_refused_not_clamped(tmp_path, field, value):
    d = _saved(tmp_path)
    assert d["curves"], "the fixture has curves"
    d["curves"][0]["points"][0][field] = value
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(Exception) as e:
        load_calibration(p)
    msg = str(e.value)
    assert f"curves[0] ({d['curves'][0]['quantity']} on {d['curves'][0]['device']}).points[0].fitted = {value!r} is outside (0, 1]" in msg
    assert "regenerate it with `harness calibrate`" in msg


def test_non_positive_link_bandwidth_is_refused(tmp_path):
    d = _saved(tmp_path)
    d["links"][0]["bandwidth_bytes_per_s"]["value"] = -5.0
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(Exception, match=r"links\[0\] .*bandwidth_bytes_per_s.value = -5.0 must be > 0"):
        load_calibration(p)


def test_no_curves_warns_and_nothing_at_all_is_refused(tmp_path, capsys):
    from harness.calibration.file import load_calibration_for_model

    d = _saved(tmp_path)
    d["curves"] = []
    p = tmp_path / "nocurves.json"
    p.write_text(json.dumps(d))
    load_calibration_for_model(p)
    assert "has no efficiency curves" in capsys.readouterr().err
    for k in ("links", "stages"):
        d[k] = []
    d["storage"], d["cpu_expert_flops_per_s"], d["host_memory_bandwidth_bytes_per_s"] = {}, None, None
    p.write_text(json.dumps(d))
    with pytest.raises(Exception, match="holds no constants"):
        load_calibration(p)


def test_binary_calibration_file(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe")
    code = main(["model", "plan", str(ROOT / "workloads" / "scenarios" / "ch9-hetero-pd.toml"), "--calibration", str(p)])
    err = capsys.readouterr().err
    assert code == 1 and "is not UTF-8 text" in err and "Traceback" not in err
