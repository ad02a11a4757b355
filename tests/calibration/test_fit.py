"""Fitting: synthetic runs generated from known constants are fitted back within stated tolerances."""

import dataclasses
import json

import numpy as np
import pytest

from harness.calibration.fit import fit_calibration, pav_increasing, wls_line
from harness.calibration.runs import load_machine_runs
from harness.calibration.synthetic import CPU_MACHINE, SyntheticMachine, chapter_decode_mbu, write_synthetic_run
from harness.errors import HarnessError

GPU = SyntheticMachine()


@pytest.fixture(scope="module")
def gpu_record(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    for seed in (11, 12):
        write_synthetic_run(root, GPU, seed)
    return fit_calibration(load_machine_runs(root / GPU.machine), seed=0, n_bootstrap=100)


def test_pav_pools_violators():
    assert pav_increasing([1, 3, 2, 4]).tolist() == pytest.approx([1, 2.5, 2.5, 4])
    assert pav_increasing([0.5, 0.4, 0.3], [1, 1, 2]).tolist() == pytest.approx([0.375] * 3)
    y = np.array([0.1, 0.2, 0.3])
    assert pav_increasing(y).tolist() == pytest.approx(y.tolist())


def test_wls_recovers_an_exact_line_and_refits_negative_intercepts():
    x = np.array([1e3, 1e5, 1e7, 1e9])
    a, b = wls_line(x, 5e-6 + x / 25e9, 1 / (5e-6 + x / 25e9) ** 2)
    assert a[0] == pytest.approx(5e-6, rel=1e-9) and 1 / b[0] == pytest.approx(25e9, rel=1e-9)
    a, b = wls_line(x, x / 25e9 - 1e-7 * (x < 1e4), np.ones(4))
    assert a[0] == 0.0 and b[0] > 0


def test_chapter_interpolation_batch_32():
    # Chapter 9, §9.2.3: 33 % at batch 1 and 65 % at batch 64 interpolate to "about 49 %" at batch 32
    assert chapter_decode_mbu(32) == pytest.approx(0.49, abs=0.005)


def test_fit_reads_49_percent_at_batch_32_from_two_measured_points(tmp_path):
    m = dataclasses.replace(GPU, decode_batches=(1, 64), decode_mbu=(0.33, 0.65), suites=("decode",), noise_cv=0.005)
    write_synthetic_run(tmp_path, m, 1)
    rec = fit_calibration(load_machine_runs(tmp_path / m.machine), n_bootstrap=50)
    c = rec.curve("h200-sxm", "decode_bandwidth_efficiency")
    assert c.at(32) == pytest.approx(0.49, abs=0.006)  # chapter 9, §9.2.3: ≈49 % at batch 32


def test_efficiency_curves_recovered_within_2_percent(gpu_record):
    dec = gpu_record.curve("h200-sxm", "decode_bandwidth_efficiency", "bf16")
    for b, true in zip(GPU.decode_batches, GPU.decode_mbu):
        p = next(p for p in dec.points if p.x == b)
        assert p.measured.value == pytest.approx(true, rel=0.02)
        assert p.measured.low <= p.measured.value <= p.measured.high
    assert np.all(np.diff([p.fitted for p in dec.points]) >= 0)
    pre = gpu_record.curve("h200-sxm", "prefill_compute_efficiency", "bf16")
    for t, true in zip(GPU.prefill_tokens, GPU.prefill_mfu):
        assert next(p for p in pre.points if p.x == t).measured.value == pytest.approx(true, rel=0.02)
    assert set(dec.run_ids) == {"synthetic-synthetic-h200-0011", "synthetic-synthetic-h200-0012"}


def test_links_recovered_and_chunked_cases_left_out(gpu_record):
    for link, direction, memory, alpha, bw in GPU.links:
        lf = gpu_record.link(f"{link}:{direction}:{memory}")
        assert lf is not None
        assert lf.bandwidth_bytes_per_s.value == pytest.approx(bw, rel=0.02)
        assert lf.alpha_s.value == pytest.approx(alpha, rel=0.10)
        assert lf.alpha_s.low <= lf.alpha_s.value <= lf.alpha_s.high
        assert len(lf.sizes_bytes) == len(GPU.transfer_sizes)  # the 72-chunk case is not a size point
        assert max(abs(r) for r in lf.residual_fraction) < 0.05


def test_single_constants_recovered(gpu_record):
    r = gpu_record
    assert r.cpu_expert_flops_per_s.value == pytest.approx(GPU.cpu_expert_flops_per_s, rel=0.02)
    assert r.host_memory_bandwidth_bytes_per_s.value == pytest.approx(GPU.host_memory_bandwidth_bytes_per_s, rel=0.02)
    assert r.storage["read"].value == pytest.approx(GPU.storage_read_bytes_per_s, rel=0.02)
    assert r.storage["write"].value == pytest.approx(GPU.storage_write_bytes_per_s, rel=0.02)
    stages = {s.phase: s for s in r.stages}
    assert stages["prefill"].rate.value == pytest.approx(GPU.stage_prefill_tokens_per_s, rel=0.02)
    assert stages["decode"].rate.value == pytest.approx(GPU.stage_decode_calls_per_s, rel=0.02)
    assert stages["decode"].batch == 32 and stages["decode"].context_tokens == 8704


def test_cpu_machine_recovered(tmp_path):
    write_synthetic_run(tmp_path, CPU_MACHINE, 5)
    rec = fit_calibration(load_machine_runs(tmp_path / CPU_MACHINE.machine), n_bootstrap=50)
    c = rec.curve("cpu", "prefill_compute_efficiency", "fp32")
    assert [p.measured.value for p in c.points] == pytest.approx(list(CPU_MACHINE.prefill_mfu), rel=0.02)
    assert rec.link("memcpy").bandwidth_bytes_per_s.value == pytest.approx(10e9, rel=0.02)


def test_bootstrap_is_deterministic_with_a_seed(tmp_path):
    write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode", "transfer")), 3)
    mr = load_machine_runs(tmp_path / GPU.machine)
    a = fit_calibration(mr, seed=7, n_bootstrap=50).to_dict()
    b = fit_calibration(mr, seed=7, n_bootstrap=50).to_dict()
    c = fit_calibration(mr, seed=8, n_bootstrap=50).to_dict()
    for d in (a, b, c):
        d.pop("created_unix_s")
    assert a == b and a != c


def test_non_monotone_decode_points_are_pooled(tmp_path):
    m = dataclasses.replace(GPU, decode_batches=(1, 8, 64), decode_mbu=(0.40, 0.30, 0.60), suites=("decode",), noise_cv=0.001)
    write_synthetic_run(tmp_path, m, 1)
    rec = fit_calibration(load_machine_runs(tmp_path / m.machine), n_bootstrap=20)
    fitted = [p.fitted for p in rec.curves[0].points]
    assert fitted[0] == pytest.approx(fitted[1]) and fitted[0] == pytest.approx(0.35, abs=0.005)
    assert any("monotone" in w for w in rec.warnings)


def test_runs_with_different_key_facts_are_refused(tmp_path):
    write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode",)), 1)
    write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode",), gpu_driver="560.1"), 2)
    with pytest.raises(HarnessError, match=r"key fact 'gpu_driver'.*'550.00-synthetic'.*'560.1'"):
        load_machine_runs(tmp_path / GPU.machine)


def test_schema_version_a_run_was_written_with_is_a_key_fact(tmp_path):
    a = write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode",)), 1)
    b = write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode",)), 2)
    mf = json.loads((b / "manifest.json").read_text())
    mf["schema_version"] = 1
    (b / "manifest.json").write_text(json.dumps(mf))
    with pytest.raises(HarnessError, match="schema_version"):
        load_machine_runs(a.parent)


def test_too_few_batches_says_what_to_run(tmp_path):
    m = dataclasses.replace(GPU, decode_batches=(32,), decode_mbu=(0.49,), suites=("decode",))
    write_synthetic_run(tmp_path, m, 1)
    with pytest.raises(HarnessError, match=r"at least 2 batch sizes.*--suite decode"):
        fit_calibration(load_machine_runs(tmp_path / m.machine))


def test_too_few_transfer_sizes_says_what_to_run(tmp_path):
    m = dataclasses.replace(GPU, transfer_sizes=(4096, 2**20), suites=("transfer",))
    write_synthetic_run(tmp_path, m, 1)
    with pytest.raises(HarnessError, match=r"link pcie:d2h:pinned: 2 transfer size.*at least 3.*--suite transfer"):
        fit_calibration(load_machine_runs(tmp_path / m.machine))


def test_missing_and_mixed_directories_are_errors(tmp_path):
    with pytest.raises(HarnessError, match="does not exist"):
        load_machine_runs(tmp_path / "nope")
    with pytest.raises(HarnessError, match="no 'micro' or 'import' runs"):
        load_machine_runs(tmp_path)
    write_synthetic_run(tmp_path, dataclasses.replace(GPU, suites=("decode",)), 1)
    write_synthetic_run(tmp_path, dataclasses.replace(CPU_MACHINE, suites=("decode",)), 1)
    with pytest.raises(HarnessError, match="holds runs of 2 machines"):
        load_machine_runs(tmp_path)


def test_above_peak_cases_are_left_out_with_a_warning(tmp_path):
    # MBU 1.2 is impossible: the microbenchmark marks such a case invalid, calibration leaves it out
    m = dataclasses.replace(GPU, decode_batches=(1, 16, 64), decode_mbu=(0.33, 0.40, 1.2), suites=("decode",))
    write_synthetic_run(tmp_path, m, 1)
    rec = fit_calibration(load_machine_runs(tmp_path / m.machine), n_bootstrap=20)
    assert [p.x for p in rec.curves[0].points] == [1, 16]
    assert any("invalid" in w for w in rec.warnings)


def test_above_peak_points_not_marked_invalid_are_still_never_fitted(tmp_path):
    # a case whose `valid` flag missed it (executed work not recorded, imported row): the fit flags it itself
    import pandas as pd

    m = dataclasses.replace(GPU, decode_batches=(1, 16, 64), decode_mbu=(0.33, 0.40, 1.2), suites=("decode",))
    run = write_synthetic_run(tmp_path, m, 1)
    part = next((run / "micro_cases").glob("*.parquet"))
    df = pd.read_parquet(part)
    assert not df["valid"].all()  # the microbenchmark did flag it
    df.assign(valid=True).to_parquet(part)
    rec = fit_calibration(load_machine_runs(tmp_path / m.machine), n_bootstrap=20)
    assert [p.x for p in rec.curves[0].points] == [1, 16]
    assert all(p.measured.value <= 1.0 and p.fitted <= 1.0 for p in rec.curves[0].points)
    assert any("120% of the spec peak" in w and "left out of the curve" in w for w in rec.warnings)
