"""The model on measured constants: `harness model plan --calibration FILE`."""

import dataclasses
import json

import pytest

from harness.calibration.calibrate import calibrate
from harness.calibration.file import load_calibration_for_model
from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run
from harness.cli import main
from harness.model.plan import plan
from harness.specs.scenario import load_scenario
from tests.conftest import SCENARIOS

HETERO = SCENARIOS / "ch9-hetero-pd.toml"
PROXY = {"a100-80gb-sxm": "h200-sxm", "h20-96gb": "h200-sxm"}


def _calibration(tmp_path, m: SyntheticMachine, proxy=None):
    write_synthetic_run(tmp_path / "results", m, 1)
    _, path = calibrate(tmp_path / "results" / m.machine, tmp_path / "cal.json", n_bootstrap=50, proxy=proxy)
    return path


def test_flat_50_percent_measurements_reproduce_example_9_2(tmp_path):
    # measured efficiencies equal to the chapter's assumption must give the chapter's numbers back
    m = SyntheticMachine(decode_mbu=(0.5,) * 7, prefill_mfu=(0.5,) * 5, suites=("gemm", "decode"), noise_cv=0.002)
    r = plan(load_scenario(HETERO), calibration=load_calibration_for_model(_calibration(tmp_path, m, PROXY)))
    assert r.pd.best.requests_per_s == pytest.approx(4.55, abs=0.02)  # chapter 9, example 9.2: 4.55 req/s
    assert r.colocated.requests_per_s == pytest.approx(3.02, abs=0.02)  # example 9.2: 3.02 req/s
    assert r.drain["pd"].clear_at_s == pytest.approx(43.2, abs=0.5)  # §9.6.1: clears at ≈43 s


def test_decode_efficiency_read_at_the_scenario_batch(tmp_path):
    m = dataclasses.replace(SyntheticMachine(), suites=("gemm", "decode"), noise_cv=0.002)
    r = plan(load_scenario(HETERO), calibration=load_calibration_for_model(_calibration(tmp_path, m, PROXY)))
    e = r.stage_rates["h20-96gb"].efficiency
    assert e.bandwidth == pytest.approx(0.49, abs=0.006)  # §9.2.3 curve read at batch 32
    assert e.compute == pytest.approx(0.62, abs=0.006)  # prefill at 8192 tokens per GPU
    assert "measured" in e.source and "proxy" in e.source
    rows = {c.constant: c for c in r.calibration.constants}
    assert rows["h20-96gb.bandwidth_efficiency"].at == {"batch": 32, "context_tokens": 8704.0}
    assert rows["h20-96gb.bandwidth_efficiency"].origin == "measured (proxy: h200-sxm)"
    assert rows["link.nic-200g.bandwidth_bytes_per_s"].origin == "datasheet default"
    ci = r.calibration.capacity_interval
    for iv in (ci.colocated_requests_per_s, ci.chunked_colocated_requests_per_s, ci.pd_best_requests_per_s):
        assert iv.low < iv.value < iv.high
    assert ci.pd_best_requests_per_s.value == r.pd.best.requests_per_s
    assert ci.pd_best_clear_at_s.low < ci.pd_best_clear_at_s.value < ci.pd_best_clear_at_s.high


def test_unmeasured_gpus_keep_datasheet_defaults_and_say_so(tmp_path):
    m = dataclasses.replace(SyntheticMachine(), suites=("decode",))
    r = plan(load_scenario(HETERO), calibration=load_calibration_for_model(_calibration(tmp_path, m)))
    base = plan(load_scenario(HETERO))
    assert r.pd.best == base.pd.best
    assert {c.origin for c in r.calibration.constants} == {"datasheet default"}
    assert base.calibration is None and "calibration" not in base.to_dict()


def test_fitted_link_replaces_the_catalog_link(tmp_path):
    m = dataclasses.replace(SyntheticMachine(), suites=("transfer",),
                            links=(("pcie", "h2d", "pinned", 20e-6, 10e9), ("pcie", "d2h", "pinned", 20e-6, 12e9)))
    path = _calibration(tmp_path, m, {"nic-200g": "pcie"})
    r = plan(load_scenario(HETERO), calibration=load_calibration_for_model(path))
    # the slower direction carries the hand-off: 1.125 GiB at 10 GB/s
    assert r.kv.link_bandwidth_bytes_per_s == pytest.approx(10e9, rel=0.02)
    assert r.kv.transfer_s == pytest.approx(20e-6 + 1.125 * 2**30 / 10e9, rel=0.02)
    assert "measured pcie:h2d:pinned, proxy" in r.kv.link
    rows = {c.constant: c for c in r.calibration.constants}
    assert rows["link.nic-200g.startup_latency_s"].origin == "measured (proxy: pcie:h2d:pinned)"


def test_plan_cli_with_calibration(tmp_path, capsys):
    m = dataclasses.replace(SyntheticMachine(), suites=("gemm", "decode"))
    path = _calibration(tmp_path, m, PROXY)
    assert main(["model", "plan", str(HETERO), "--calibration", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Calibration" in out and "measured (proxy: h200-sxm)" in out and "pd_best_requests_per_s" in out
    assert main(["model", "plan", str(HETERO), "--calibration", str(path), "--json", "--no-grid"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["calibration"]["machine"] == "synthetic-h200"


def test_calibration_fields_are_documented(tmp_path):
    from tests.conftest import ROOT

    doc = (ROOT / "docs" / "model.md").read_text()
    m = dataclasses.replace(SyntheticMachine(), suites=("gemm", "decode"))
    r = plan(load_scenario(HETERO), calibration=load_calibration_for_model(_calibration(tmp_path, m, PROXY)), include_grid=False).to_dict()
    cal = r["calibration"]
    keys = {f"calibration.{k}" for k in cal} | {f"calibration.constants[].{k}" for k in cal["constants"][0]}
    keys |= {f"calibration.capacity_interval.{k}" for k in cal["capacity_interval"]}
    keys |= {f"calibration.capacity_interval.<field>.{k}" for k in ("value", "low", "high")}
    missing = [k for k in sorted(keys) if f"`{k}`" not in doc]
    assert not missing
