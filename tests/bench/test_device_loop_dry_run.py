"""microbench/device_loop.sh end to end on the CPU (`--device cpu`): the same script the lent GPU runs, with
llama.cpp's CPU build and a tiny random model. Every step must pass, OUT must hold only the three files, the tarball
must file with `harness micro import-device`, and the offline comparison must run on it.

Slow (about 3-5 minutes on the project's two busy cores: llama.cpp's tools, the server, 8 short load runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

from harness.engines.llama_cpp import binary_available
from harness.importers.device_run import import_device_run
from harness.store import Run
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(binary_available() is not None, reason=binary_available() or "")]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work")
    env = {**os.environ, "DEVICE_LOOP_WORK": str(work), "BUDGET_S": "400", "PYTHON": sys.executable}
    p = subprocess.run(["bash", "microbench/device_loop.sh", str(out), "--device", "cpu"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    return out, work, p


def test_every_step_passes_and_out_holds_three_files(dry_run):
    out, _, p = dry_run
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert sorted(x.name for x in out.iterdir()) == ["checks.json", "device_loop.log", "run.tar.gz"]
    checks = json.loads((out / "checks.json").read_text())["steps"]
    log = (out / "device_loop.log").read_text()[-4000:]
    for step in ("prepare", "facts", "model", "kernels", "twins", "served", "compare"):
        assert checks[step]["exit"] == "0" and checks[step]["status"] == "ok", (step, checks[step], log)
    served = checks["served"]["result"]
    assert served["measured"] >= 4, served  # 2 mixes x (1 burst + 1 rate), at least once each


def test_the_tarball_files_with_import_device_and_holds_the_comparison(dry_run, tmp_path):
    out, _, _ = dry_run
    with tarfile.open(out / "run.tar.gz") as t:
        names = t.getnames()
    assert not any(n.endswith("model.gguf") for n in names)  # the model is made again, never carried back
    filed = import_device_run(out / "run.tar.gz", tmp_path / "results")
    kinds = {Run(r["path"]).manifest.kind for r in filed["runs"]}
    assert {"micro", "loop-gpu-device"} <= kinds, kinds
    run = next(Run(r["path"]) for r in filed["runs"] if Run(r["path"]).manifest.kind == "loop-gpu-device")
    cmp = run.table("device_loop_comparison")
    assert set(cmp["twin"]) >= {"a", "b"} and set(cmp["metric"]) == {"capacity_requests_per_s", "ttft_p50_s", "tpot_p50_s"}
    assert cmp["error"].notna().sum() >= 4  # measured points have errors (a TPOT of 0, all tokens in one chunk, has none)
    assert (run.path / "step-time.json").is_file() and (run.path / "twin-a.json").is_file()
    # each twin's LoopReport by the loop's own compare_stored (its absolute and repeatability verdicts)
    rep = json.loads((run.path / "loop-report-b.json").read_text())
    assert rep["kind"] == "loop-gpu" and rep["verdict"]["points"] >= 4 and "repeatability" in rep


def test_the_offline_comparison_runs_again_on_the_work_folder(dry_run):
    from harness.bench.device_compare import compare_work, markdown

    _, work, _ = dry_run
    cmp = compare_work(work)
    assert cmp["verdict"]["a"]["judged"] >= 2 and "twin (a)" in markdown(cmp)
