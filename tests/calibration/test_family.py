"""Kernel families: names, the check, and a curve of another family not applied to a plan without a proxy."""

import dataclasses

import pytest

from harness.calibration.apply import MeasuredConstants
from harness.calibration.calibrate import calibrate
from harness.calibration.family import case_family, check_family, ggml_family, ggml_type_name
from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run
from harness.errors import HarnessError


def test_family_names():
    assert ggml_type_name("MOSTLY_Q4_K_M") == "q4_K_M"
    assert ggml_type_name("Q8_0") == "q8_0" and ggml_type_name("BF16") == "bf16" and ggml_type_name("Q6_K") == "q6_K"
    assert ggml_family("Q4_K") == "ggml-q4_K-cpu"
    assert case_family("torch", "fp32", "cpu") == "torch-fp32"
    assert case_family("torch", "bf16", "cuda:0") == "cuda-bf16"
    assert case_family("test-backend-ops", "q6_K", "cpu") == "ggml-q6_K-cpu"


def test_check_family_refuses_unless_proxy_and_then_says_so():
    assert check_family("ggml-q4_K_M-cpu", "ggml-q4_K_M-cpu") is None
    with pytest.raises(HarnessError, match="torch-fp32 kernels but the engine runs ggml-q4_K_M-cpu.*--proxy"):
        check_family("torch-fp32", "ggml-q4_K_M-cpu")
    note = check_family("torch-fp32", "ggml-q4_K_M-cpu", proxy=True)
    assert note.startswith("PROXY") and "torch-fp32" in note


def test_fp32_curve_is_not_applied_to_a_bf16_plan_of_the_same_gpu_without_a_proxy(tmp_path):
    m = dataclasses.replace(SyntheticMachine(), suites=("gemm", "decode"), dtype="fp32", noise_cv=0.002)
    write_synthetic_run(tmp_path / "results", m, 1)
    rec, path = calibrate(tmp_path / "results" / m.machine, tmp_path / "cal.json", n_bootstrap=20)
    assert {c.kernel_family for c in rec.curves} == {"cuda-fp32"}
    mc = MeasuredConstants(rec, str(path))
    gpu = rec.devices[0]
    pc, dc, _, _ = mc.curves(gpu, "bf16")
    assert pc is None and dc is None
    rows = mc.provenance([gpu], None, 32, 8192, "bf16", None)
    assert all("not applied" in r.origin and "cuda-fp32" in r.origin for r in rows)
    # same family: applied and labelled
    pc, dc, _, _ = mc.curves(gpu, "fp32")
    assert pc is not None and dc is not None
    assert {r.family for r in mc.provenance([gpu], None, 32, 8192, "fp32", None)} == {"cuda-fp32"}
    # told (a proxy entry for the GPU): applied
    pc, _, _, _ = mc.with_proxy({gpu: gpu}).curves(gpu, "bf16")
    assert pc is not None
