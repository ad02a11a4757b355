"""cli.main: an unexpected exception becomes one line naming the verb and a log; the traceback goes to the log."""

import argparse

import pytest

from harness import cli
from harness.records import new_manifest
from harness.store import RunWriter


def _boom(args: argparse.Namespace) -> int:
    raise RuntimeError("deep inside\nsecond line")


def _boom_in_run(args: argparse.Namespace) -> int:
    w = RunWriter(new_manifest("load"), args._results)
    with w:
        raise KeyError("missing-key")


@pytest.fixture
def patched(monkeypatch):
    import harness.cli.specs

    def build(fn):
        monkeypatch.setattr(harness.cli.specs, "main", fn)  # the verb `specs` now fails from inside
    return build


def test_crash_without_a_run_goes_to_the_log_dir(tmp_path, monkeypatch, capsys, patched):
    monkeypatch.setenv("HARNESS_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.delenv("HARNESS_TRACEBACK", raising=False)
    patched(_boom)
    code = cli.main(["specs"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "error: harness specs failed unexpectedly (RuntimeError: deep inside)" in err
    logs = list((tmp_path / "logs").glob("specs-*.log"))
    assert len(logs) == 1 and str(logs[0]) in err
    text = logs[0].read_text()
    assert text.startswith("harness specs specs\n") and "Traceback" in text and "second line" in text


def test_crash_inside_a_run_logs_into_the_run_directory(tmp_path, monkeypatch, capsys, patched):
    monkeypatch.setenv("HARNESS_LOG_DIR", str(tmp_path / "logs"))
    patched(lambda a: _boom_in_run(argparse.Namespace(_results=tmp_path / "results")))
    code = cli.main(["specs"])
    err = capsys.readouterr().err
    runs = [p for p in (tmp_path / "results").glob("*/*") if p.is_dir()]
    assert code == 1 and len(runs) == 1 and str(runs[0] / "error.log") in err and "Traceback" not in err
    assert "KeyError" in (runs[0] / "error.log").read_text()
    assert not (tmp_path / "logs").exists()


def test_traceback_on_the_terminal_when_asked(tmp_path, monkeypatch, capsys, patched):
    monkeypatch.setenv("HARNESS_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("HARNESS_TRACEBACK", "1")
    patched(_boom)
    assert cli.main(["specs"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_harness_errors_and_usage_are_unchanged(capsys):
    assert cli.main(["model", "plan", "/nonexistent.toml"]) == 1
    assert capsys.readouterr().err.startswith("error: scenario file")
