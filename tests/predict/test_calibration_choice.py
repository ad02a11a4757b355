"""Where harness predict takes its constants from: the database entry by default, the datasheet when told, and it says so."""

import importlib.util

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.model.kernel_tables_codec import LOG_STEP
from harness.predict.calibration import step_constants


def test_auto_picks_the_database_entry_of_the_gpu_with_its_kernel_grids_and_says_how_old():
    c = step_constants("auto", "h200-sxm", "vllm")
    assert c.kind == "imported kernel data" and "calibration/gpus/h200-sxm/aic-vllm" in c.label and "days old" in c.describe()
    assert "kernel grids" in c.label and "fitted constants for" not in c.label  # every operator family has a grid
    assert c.constants.gemm == {}  # a GEMM shape off the grids falls back as --calibration aic does
    t = c.tables
    assert {"bf16", "fp8", "fp8-block"} <= set(t.gemm) and 8 in t.allreduce and t.decode_attention and t.moe
    assert "aiconfigurator 0.12.0 h200_sxm (gemm vllm 0.24.0" in t.source


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="aiconfigurator is not installed: the entry is not compared with the tables it was filed from")
@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_shipped_entry_holds_the_installed_tables(engine, monkeypatch, tmp_path):
    """The committed h200-sxm entries were filed from aiconfigurator 0.12.0: their grids are its tables, to LOG_STEP."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    db, aic = step_constants("auto", "h200-sxm", engine).tables, step_constants("aic", "h200-sxm", engine).tables
    assert db.source == aic.source
    for op in ("gemm", "decode_attention", "prefill_attention", "allreduce", "moe", "mla_decode", "mla_prefill"):
        a, b = getattr(db, op), getattr(aic, op)
        assert set(a) == set(b), op
        for k in a:
            assert a[k].axes == b[k].axes and np.abs(a[k].log_latency - b[k].log_latency).max() <= LOG_STEP / 2 + 1e-9


def test_none_is_the_datasheet_labelled_uncalibrated():
    c = step_constants("none", "h200-sxm", "vllm")
    assert c.kind == "uncalibrated" and c.constants.gemm == {} and "50 %" in c.describe()


def test_a_gpu_without_an_entry_and_a_bad_choice():
    assert step_constants("auto", "h20-96gb", "vllm").kind == "uncalibrated"  # no entry, no imported tables for it
    with pytest.raises(HarnessError, match="has no entry for h20-96gb"):
        step_constants("db", "h20-96gb", "vllm")
    with pytest.raises(HarnessError, match="give auto, db, aic, none"):
        step_constants("sometimes", "h200-sxm", "vllm")


def test_an_operator_family_without_grids_takes_the_entrys_fitted_constants():
    # A100 vLLM 0.14.0: aiconfigurator timed other kernels (vllm_default, vllm_flash_attn) than the ones the grids read
    c = step_constants("auto", "a100-80gb-sxm", "vllm")
    assert "its fitted constants for GEMM, attention (no grid)" in c.label and "none of the kernels read here" in c.label
    assert c.constants.gemm["bf16"].compute_efficiency < 1 and 8 in c.tables.allreduce
