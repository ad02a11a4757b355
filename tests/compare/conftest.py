import dataclasses

import pytest

from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run


@pytest.fixture(scope="session")
def load_runs(tmp_path_factory):
    """Synthetic load runs: a, b (same distributions as a), slow (TTFT median +25 %), other (another workload)."""
    d = tmp_path_factory.mktemp("results")
    base = SyntheticLoad()
    return {
        "a": write_synthetic_load_run(d, base, seed=1, run_id="a"),
        "b": write_synthetic_load_run(d, base, seed=2, run_id="b"),
        "slow": write_synthetic_load_run(d, dataclasses.replace(base, ttft_median_s=0.25), seed=3, run_id="slow"),
        "fast_itl": write_synthetic_load_run(d, dataclasses.replace(base, itl_median_s=0.016), seed=4, run_id="fast_itl"),
        "other": write_synthetic_load_run(d, dataclasses.replace(base, workload_hash="synthetic-workload-0002"), seed=5,
                                          run_id="other"),
        "other_scenario": write_synthetic_load_run(d, dataclasses.replace(base, scenario="another"), seed=6,
                                                   run_id="other_scenario"),
    }
