"""Speed: a calibration report of 100 runs renders in under 10 s (issue 6).

The benchmark (`make bench`, pytest-benchmark) records the time and judges it; with benchmarks disabled (the
default `make test`) only the output is checked, so a busy machine cannot fail the suite.
"""

import dataclasses
import time

import pytest

from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run
from harness.report.calibration import ReportOptions, render

TARGET_S = 10.0


@pytest.fixture(scope="module")
def hundred_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("results100")
    m = dataclasses.replace(SyntheticMachine(), n_samples=10)
    for seed in range(100):
        write_synthetic_run(root, m, seed)
    return root / m.machine


@pytest.mark.slow
def test_report_of_100_runs_renders_under_10_s(benchmark, hundred_runs, tmp_path):
    t0 = time.perf_counter()
    written = benchmark.pedantic(render, args=(hundred_runs, tmp_path / "out", ReportOptions()), rounds=1, iterations=1)
    elapsed = time.perf_counter() - t0
    assert (tmp_path / "out" / "index.html") in written
    if not benchmark.disabled:
        assert elapsed < TARGET_S, f"report of 100 runs took {elapsed:.1f} s (target {TARGET_S:g} s)"
