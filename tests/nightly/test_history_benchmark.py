"""A history of a few hundred runs loads, is judged and plots in seconds (pytest-benchmark; a loose plain bound too)."""

import time

import numpy as np
import pytest

from harness.nightly.drift import DriftOptions, detect_drift
from harness.nightly.history import append_history, load_history
from harness.nightly.report import render_nightly

N_RUNS = 300
N_CONSTANTS = 36


@pytest.fixture(scope="module")
def big_history(tmp_path_factory):
    d = tmp_path_factory.mktemp("history")
    rng = np.random.default_rng(0)
    for k in range(N_RUNS):
        rows = [{"constant": f"suite:case-{i}:torch:cpu:fp32", "value": float((i + 1) * 1e9 * np.exp(rng.normal(0, 0.03))),
                 "unit": "bytes/s", "better": "higher", "source": "micro", "n_samples": 10, "low": np.nan, "high": np.nan}
                for i in range(N_CONSTANTS)]
        append_history(d, rows, machine="bench-machine", run_id=f"run-{k:04d}", created_unix_s=1.7e9 + 86400 * k)
    return d


def _load_judge_plot(history_dir, out_dir):
    h = load_history(history_dir, machine="bench-machine")
    res = detect_drift(h, DriftOptions())
    paths = render_nightly(h, res, out_dir, DriftOptions())
    return h, res, paths


def test_history_of_300_runs_loads_and_plots_in_seconds(big_history, tmp_path, benchmark):
    t0 = time.perf_counter()
    h, res, paths = benchmark.pedantic(_load_judge_plot, args=(big_history, tmp_path / "rep"), rounds=1, iterations=1)
    elapsed = time.perf_counter() - t0
    assert len(h) == N_RUNS * N_CONSTANTS and h["run_id"].nunique() == N_RUNS
    assert len(res) == N_CONSTANTS and not [r for r in res if r.status == "drift"]
    assert sum(p.suffix == ".png" for p in paths) == N_CONSTANTS // 12  # 12 panels per trend figure
    if not benchmark.disabled:  # the speed goal is a benchmark (`make bench`), not a timed test
        assert elapsed < 30.0
