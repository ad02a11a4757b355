"""A run with a damaged parquet part: compare proceeds on the readable parts with a warning naming the file;
when nothing of a table is readable, compare and report stop with that file named (never a traceback)."""

import pytest

from harness.cli import main
from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run
from harness.store import Run


def _split_requests(run_dir, parts=3):
    """Rewrite the run's requests table as `parts` parts (a long run appends many)."""
    run = Run(run_dir)
    df = run.table("requests").drop(columns=["schema_version", "run_id"])
    for p in (run_dir / "requests").glob("part-*.parquet"):
        p.unlink()
    from harness.store import write_part

    step = -(-len(df) // parts)
    for i in range(parts):
        write_part(run_dir, run.manifest.run_id, "requests", df.iloc[i * step:(i + 1) * step], i + 1)


@pytest.fixture
def runs(tmp_path):
    a = write_synthetic_load_run(tmp_path / "results", SyntheticLoad(requests=120), 1, "a")
    b = write_synthetic_load_run(tmp_path / "results", SyntheticLoad(requests=120), 2, "b")
    _split_requests(b)
    return a, b


def test_compare_proceeds_on_the_readable_parts_with_a_warning(runs, tmp_path, capsys):
    a, b = runs
    bad = b / "requests" / "part-00002.parquet"
    bad.write_bytes(bad.read_bytes()[:64])
    code = main(["compare", str(a), str(b), "--to", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert code in (0, 3), err
    assert "warning:" in err and str(bad) in err and "the other 2 of its 3 parts" in err and "Traceback" not in err


def test_nothing_readable_names_the_file(runs, tmp_path, capsys):
    a, b = runs
    for p in (b / "requests").glob("part-*.parquet"):
        p.write_bytes(b"PAR1 damaged")
    code = main(["compare", str(a), str(b), "--to", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert code == 1 and "none of its 3 parts is readable" in err and "part-00001.parquet" in err and "Traceback" not in err
    code = main(["report", str(b), "--to", str(tmp_path / "rep2")])
    err = capsys.readouterr().err
    assert code == 1 and "none of its 3 parts is readable" in err and "Traceback" not in err
