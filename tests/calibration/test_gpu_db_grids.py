"""Database entries that carry kernel grids (schema 4): filed from an import, picked by default, the same step model as
the kernel tables they came from; old entries still read; a damaged grid is a clear error. No aiconfigurator needed:
the kernel data is the committed fixture tests/data/aic/ (written in aiconfigurator 0.12.0's schema)."""

import json

import pytest

from harness.calibration import gpu_db
from harness.calibration.calibrate import calibrate
from harness.errors import HarnessError
from harness.importers import aic
from harness.model.kernel_tables_codec import GRID_FORMAT, LOG_STEP
from harness.model.parallel import Parallel
from harness.predict.calibration import step_constants
from harness.predict.deployment import Deployment, Workers, Workload
from harness.predict.predict import predict
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "data" / "aic" / "systems" / "data"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """The fixture's vllm tables imported and filed, as `harness micro import-aic PATH --into-db DIR` files them."""
    out, db = tmp_path_factory.mktemp("results"), tmp_path_factory.mktemp("db")
    (summary,) = aic.import_aic(FIXTURE, ["h200_sxm"], ["vllm"], out, command_line=["harness", "micro", "import-aic"])
    calibrate(summary["path"], into_db=True, db_dir=db, command="harness calibrate RUN --into-db", n_bootstrap=20)
    return db


@pytest.fixture
def use_db(db, monkeypatch, tmp_path):
    monkeypatch.setenv(gpu_db.DB_ENV, str(db))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the aic path's table cache, not the user's
    return db


def test_the_filed_entry_carries_the_grids_of_its_import(db):
    path = db / "h200-sxm" / "aic-vllm-0.24.0.json"
    d = json.loads(path.read_text())
    kt = d["kernel_tables"]
    assert d["schema_version"] == 4 and kt["format"] == GRID_FORMAT and kt["gpu"] == "h200-sxm"
    # (the fixture's context attention has too few rows per shape for a table)
    assert {b["op"] for b in kt["blocks"]} == {"gemm", "decode_attention", "allreduce", "moe"}
    assert "aiconfigurator data at" in kt["source"] and "gemm vllm 0.24.0" in kt["source"]
    e = gpu_db.load_entry(path)
    t = e.record.kernel_tables
    assert set(t.gemm) == {"bf16"} and 8 in t.allreduce  # the fixture's fp8 GEMMs are not vLLM's FP8 kernel source
    assert e.record.curves  # the fitted constants stay beside the grids
    (row,) = gpu_db.summary_rows([e])
    assert row["kernel_grids"] == gpu_db.grid_count(t) == sum(len(b["keys"]) for b in kt["blocks"])


def test_the_default_pick_predicts_with_the_grids_as_the_kernel_tables_do(use_db):
    auto = step_constants("auto", "h200-sxm", "vllm")
    tabl = step_constants("aic", "h200-sxm", "vllm", kernel_data=str(FIXTURE))
    assert auto.tables is not None and auto.kind == "imported kernel data"
    assert "aic-vllm-0.24.0.json" in auto.label and "kernel grids" in auto.label
    assert auto.constants.gemm == {}  # the grids hold GEMMs: a shape off them falls back as --calibration aic does
    dep = Deployment(engine="vllm", gpu="h200-sxm", model="llama-3.1-8b", precision="bf16", workers=Workers(1, Parallel(tp=2)))
    wl = Workload(1024, 128, concurrency=8, requests=16)
    a = predict(dep, wl, calibration="auto")
    b = predict(dep, wl, constants=tabl)
    assert "aic-vllm-0.24.0.json" in a.calibration
    for got, want in ((a.ttft_s.mean, b.ttft_s.mean), (a.tpot_s.mean, b.tpot_s.mean), (a.tpot_s.p90, b.tpot_s.p90)):
        assert got == pytest.approx(want, rel=2 * LOG_STEP)  # the same step model, to the grids' stored precision


def test_an_old_schema_entry_without_grids_still_reads_and_predicts_from_its_constants(use_db, tmp_path, monkeypatch):
    d = json.loads((use_db / "h200-sxm" / "aic-vllm-0.24.0.json").read_text())
    d["schema_version"] = 3
    del d["kernel_tables"]
    old = tmp_path / "old" / "h200-sxm"
    old.mkdir(parents=True)
    (old / "aic-vllm-0.24.0.json").write_text(json.dumps(d))
    monkeypatch.setenv(gpu_db.DB_ENV, str(old.parent))
    e = gpu_db.pick("h200-sxm", "aic-vllm")
    assert e.record.kernel_tables is None and e.record.curves
    c = step_constants("auto", "h200-sxm", "vllm")
    assert "fitted constants" in c.label and c.constants.gemm["bf16"].compute_efficiency < 1


def test_a_damaged_grid_is_a_clear_error_naming_the_entry_field_and_fix(use_db, tmp_path, monkeypatch):
    d = json.loads((use_db / "h200-sxm" / "aic-vllm-0.24.0.json").read_text())
    d["kernel_tables"]["blocks"][0]["log_latency"] = d["kernel_tables"]["blocks"][0]["log_latency"][:-40]
    bad = tmp_path / "bad" / "h200-sxm"
    bad.mkdir(parents=True)
    (bad / "aic-vllm-0.24.0.json").write_text(json.dumps(d))
    monkeypatch.setenv(gpu_db.DB_ENV, str(bad.parent))
    with pytest.raises(HarnessError, match=r"entry .*aic-vllm-0.24.0.json cannot be used: .*kernel_tables: .*"
                                           r"blocks\[0\] \(gemm\): log_latency .*To use the database, restore it .*or file "
                                           r"it again"):
        step_constants("auto", "h200-sxm", "vllm")
