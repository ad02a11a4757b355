"""Where harness predict takes its constants from: the database entry by default, the datasheet when told, and it says so."""

import pytest

from harness.errors import HarnessError
from harness.predict.calibration import step_constants


def test_auto_picks_the_database_entry_of_the_gpu_and_says_how_old():
    c = step_constants("auto", "h200-sxm", "vllm")
    assert c.kind == "imported kernel data" and "calibration/gpus/h200-sxm/aic-vllm" in c.label and "days old" in c.describe()
    assert c.constants.gemm["fp8"].compute_efficiency < 1 and c.tables is not None and 8 in c.tables.allreduce


def test_none_is_the_datasheet_labelled_uncalibrated():
    c = step_constants("none", "h200-sxm", "vllm")
    assert c.kind == "uncalibrated" and c.constants.gemm == {} and "50 %" in c.describe()


def test_a_gpu_without_an_entry_and_a_bad_choice():
    assert step_constants("auto", "h20-96gb", "vllm").kind == "uncalibrated"  # no entry, no imported tables for it
    with pytest.raises(HarnessError, match="has no entry for h20-96gb"):
        step_constants("db", "h20-96gb", "vllm")
    with pytest.raises(HarnessError, match="give auto, db, aic, none"):
        step_constants("sometimes", "h200-sxm", "vllm")
