"""The device check's packaging fits the return channel, and its tarball files into the store (CPU: stub checks)."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import HarnessError
from harness.importers.device_run import import_device_run
from harness.store import Run

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "microbench" / "device_check.sh"


def _run(out: Path, work: Path, **env) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHON": sys.executable, "DEVICE_CHECK_WORK": str(work), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def stub_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("device")
    out = base / "out"
    p = _run(out, base / "work", HARNESS_DEVICE_CHECK_STUB="1")
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_output_folder_fits_the_channel(stub_run):
    files = [p for p in stub_run.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == ["checks.json", "device_check.log", "run.tar.gz"]
    assert len(files) <= 8 and all(p.stat().st_size <= 16 * 2**20 for p in files)
    assert all(len(p.relative_to(stub_run).parts) <= 3 for p in stub_run.rglob("*"))  # <= 2 folders below OUT


def test_checks_json_has_every_step_and_stubs_never_pass(stub_run):
    doc = json.loads((stub_run / "checks.json").read_text())
    assert set(doc["checks"]) == {"d2d_copy", "gemm_large", "gemm_small_graph", "pinned_sweep", "decode_mbu", "suites"}
    assert all(c.get("stub") and c["pass"] is None for c in doc["checks"].values())
    assert doc["passed"] == [] and doc["failed"] == []
    with tarfile.open(stub_run / "run.tar.gz") as t:
        names = t.getnames()
    assert any(n.startswith("results/stub-device/") and n.endswith("manifest.json") for n in names)
    assert "checks/d2d_copy.json" in names and "facts.json" in names


def test_import_device_files_the_run_under_the_machine_name(stub_run, tmp_path, capsys):
    assert main(["micro", "import-device", str(stub_run / "run.tar.gz"), "--out", str(tmp_path / "results")]) == 0
    assert "filed" in capsys.readouterr().out
    (run_dir,) = (tmp_path / "results" / "stub-device").iterdir()
    run = Run(run_dir)
    assert run.manifest.machine == "stub-device" and "micro_cases" in run.tables()
    assert "d2d_copy" in json.loads((run_dir / "device_checks.json").read_text())["checks"]
    with pytest.raises(HarnessError, match="written once"):
        import_device_run(stub_run / "run.tar.gz", tmp_path / "results")


def test_a_failing_check_is_recorded_and_the_next_still_runs(tmp_path):
    # no GPU here: the real d2d check fails in its own process; the stub-free suites step is skipped by SUITES=none
    out = tmp_path / "out"
    p = _run(out, tmp_path / "work", CHECKS="d2d_copy gemm_large", SUITES="none")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "checks.json").read_text())
    assert set(doc["checks"]) == {"d2d_copy", "gemm_large"}
    assert all(c["pass"] is False and "error" in c for c in doc["checks"].values())
    assert doc["failed"] == ["d2d_copy", "gemm_large"]


def test_import_device_refuses_unsafe_or_empty_archives(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as t:
        f = tmp_path / "x"
        f.write_text("x")
        t.add(f, arcname="../escape")
    with pytest.raises(HarnessError, match="outside the archive"):
        import_device_run(bad, tmp_path / "results")
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as t:
        t.add(f, arcname="checks/x.json")
    with pytest.raises(HarnessError, match="holds no run"):
        import_device_run(empty, tmp_path / "results")
    assert main(["micro", "import-device", str(tmp_path / "nope.tar.gz")]) == 1
