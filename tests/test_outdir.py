"""harness.outdir: an output directory the user names is made, or refused with the flag named (never a traceback)."""

import pytest

from harness.errors import HarnessError
from harness.outdir import writable_dir


def test_made_when_absent(tmp_path):
    assert writable_dir(tmp_path / "a" / "b", "--to").is_dir()
    assert not list((tmp_path / "a" / "b").iterdir())  # the write probe is removed


def test_a_file_in_the_way_or_in_the_path(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(HarnessError, match="--to '.*file': a file of that name is in the way"):
        writable_dir(f, "--to")
    with pytest.raises(HarnessError, match="a part of the path is a file"):
        writable_dir(f / "sub", "--report-dir")


def test_report_cli_names_the_flag(tmp_path, capsys):
    from harness.cli import main
    from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run

    run = write_synthetic_load_run(tmp_path / "results", SyntheticLoad(requests=40), 1, "r1")
    f = tmp_path / "blocked"
    f.write_text("x")
    code = main(["report", str(run), "--to", str(f)])
    err = capsys.readouterr().err
    assert code == 1 and "a file of that name is in the way" in err and "Traceback" not in err
