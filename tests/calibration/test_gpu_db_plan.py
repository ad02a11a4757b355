"""`harness model plan` on the GPU calibration database: the default pick, the override, and the uncalibrated label."""

import json

import pytest

from harness.calibration.calibrate import calibrate
from harness.calibration.gpu_db import DB_ENV
from harness.cli import main
from tests.conftest import ROOT, SCENARIOS

FIXTURES = ROOT / "tests" / "data" / "runs"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("db")
    calibrate(FIXTURES / "synthetic-h200", n_bootstrap=20, into_db=True, db_dir=d, command="test")
    return d


def _scenario(tmp_path, efficiency: str = "") -> str:
    """ch9-homog-a100 on 8 H200 (one GPU with an entry) and 4 H100 (none), with or without a stated efficiency."""
    text = (SCENARIOS / "ch9-homog-a100.toml").read_text()
    text = text[: text.index("# the chapter's assumption")] + text[text.index("[link]"):]
    text = text.replace('gpu = "a100-80gb-sxm"\ncount = 8', 'gpu = "h200-sxm"\ncount = 8\n\n[[pools]]\ngpu = "h100-sxm"\ncount = 4')
    text = text.replace('prefill = { "a100-80gb-sxm" = 3 }', 'prefill = { "h200-sxm" = 3, "h100-sxm" = 0 }')
    p = tmp_path / "s.toml"
    p.write_text(text.replace("[link]", efficiency + "[link]"))
    return str(p)


def _plan(capsys, *argv):
    code = main(["model", "plan", *argv, "--json", "--no-grid"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), out.err


def test_default_picks_the_entry_and_says_which_and_how_old(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DB_ENV, str(db))
    r, err = _plan(capsys, _scenario(tmp_path))
    entry = f"{db / 'h200-sxm' / 'cuda.json'}, synthetic (harness.calibration.synthetic"
    assert f"calibration: h200-sxm: {entry}" in err and "days old" in err
    assert "calibration: h100-sxm: uncalibrated: h100-sxm datasheet peaks at the chapter's default 50% efficiency" in err
    cal = r["calibration"]
    assert f"h200-sxm: {entry}" in cal["file"] and "h100-sxm: uncalibrated" in cal["file"]
    rows = {c["constant"]: c for c in cal["constants"]}
    assert rows["h200-sxm.bandwidth_efficiency"]["origin"] == "measured"
    assert rows["h100-sxm.bandwidth_efficiency"]["origin"] == "datasheet default"
    assert rows["h100-sxm.bandwidth_efficiency"]["source"].startswith("uncalibrated: h100-sxm")
    measured = r["stage_rates"]["h200-sxm"]["efficiency"]
    assert measured["bandwidth"] != 0.5 and "cuda.json" in measured["source"]
    assert r["stage_rates"]["h100-sxm"]["efficiency"]["bandwidth"] == 0.5


def test_none_and_a_stated_efficiency_keep_the_datasheet(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DB_ENV, str(db))
    r, err = _plan(capsys, _scenario(tmp_path), "--calibration", "none")
    assert r.get("calibration") is None and err == ""
    r, err = _plan(capsys, _scenario(tmp_path, "[efficiency]\ncompute = 0.5\nbandwidth = 0.5\n\n"))
    assert r.get("calibration") is None and err == ""  # the scenario's own statement, kept without a word
    r, _ = _plan(capsys, _scenario(tmp_path, "[efficiency]\ncompute = 0.5\nbandwidth = 0.5\n\n"), "--calibration", "db")
    assert r["stage_rates"]["h200-sxm"]["efficiency"]["bandwidth"] != 0.5


def test_a_per_gpu_efficiency_keeps_that_gpu_only(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DB_ENV, str(db))
    r, _ = _plan(capsys, _scenario(tmp_path, "[efficiency.per_gpu.h100-sxm]\ncompute = 0.4\nbandwidth = 0.4\n\n"))
    assert r["stage_rates"]["h200-sxm"]["efficiency"]["bandwidth"] != 0.5
    assert r["stage_rates"]["h100-sxm"]["efficiency"]["bandwidth"] == 0.4


def test_an_empty_database_plans_uncalibrated(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DB_ENV, str(tmp_path / "empty"))
    r, err = _plan(capsys, _scenario(tmp_path))
    assert r.get("calibration") is None and "calibration: h200-sxm: uncalibrated" in err


def test_chapter_scenarios_state_the_chapters_efficiency(tmp_path, capsys):
    """The chapter's pd-capacity scenarios state 50 % so that database entries never change the chapter's figures."""
    for p in sorted(SCENARIOS.glob("ch9-*.toml")):
        text = p.read_text()
        if "\nkind = " in text:
            continue  # other calculators take no calibration
        assert "\n[efficiency]\ncompute = 0.5\nbandwidth = 0.5\n" in text, p.name


def test_db_family_prefers_that_family(db, tmp_path, capsys, monkeypatch):
    from dataclasses import replace

    from harness.calibration import gpu_db

    d = tmp_path / "db"
    e = gpu_db.pick("h200-sxm", db_dir=db)
    prov = replace(e.provenance, family="aic-vllm-0.24.0", source_kind="imported kernel data", source="test")
    gpu_db.file_entry(replace(e.record, provenance=prov), db_dir=d)
    prov = replace(e.provenance, family="aic-trtllm-1.3.0rc20", source_kind="imported kernel data", source="test")
    gpu_db.file_entry(replace(e.record, provenance=prov), db_dir=d)
    monkeypatch.setenv(DB_ENV, str(d))
    _, err = _plan(capsys, _scenario(tmp_path), "--calibration", "db:aic-vllm")
    assert "calibration: h200-sxm: " in err and "aic-vllm-0.24.0.json" in err
    _, err = _plan(capsys, _scenario(tmp_path))
    assert "aic-trtllm-1.3.0rc20.json" in err  # newest on one date: family names in order
