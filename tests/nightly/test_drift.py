"""drift: the robust baseline flags an injected drift and nothing else; warming up; the z-score by hand."""

import math

import numpy as np
import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.nightly.drift import DriftOptions, detect_drift, robust_z

CONSTANTS = {f"c{i}": (10.0 ** (i - 3), "bytes/s") for i in range(12)}


def history(n_runs: int, seed: int = 0, drift: dict[str, float] | None = None, outlier_run: int | None = None) -> pd.DataFrame:
    """n_runs nights of CONSTANTS with 2 % log-normal noise; `drift` multiplies constants in the last night."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n_runs):
        for c, (v, unit) in CONSTANTS.items():
            x = v * math.exp(rng.normal(0, 0.02))
            if outlier_run == k:
                x *= 3.0  # one bad night in the baseline, for every constant
            if drift and k == n_runs - 1:
                x *= drift.get(c, 1.0)
            rows.append({"machine": "m1", "date": "2026-01-01", "run_id": f"r{k:03d}", "created_unix_s": 1.7e9 + 86400 * k,
                         "constant": c, "value": x, "unit": unit, "better": "higher"})
    return pd.DataFrame(rows)


def test_injected_drift_flagged_and_nothing_else():
    res = detect_drift(history(20, drift={"c3": 0.7, "c8": 1.25}))
    drifted = {r.constant: r for r in res if r.status == "drift"}
    assert set(drifted) == {"c3", "c8"}
    assert drifted["c3"].change_rel == pytest.approx(-0.3, abs=0.05) and drifted["c3"].direction == "worse"
    assert drifted["c8"].direction == "better" and drifted["c8"].z > 5
    assert all(r.status == "ok" and r.n_baseline == 10 for r in res if r.constant not in drifted)


def test_no_drift_no_flags_over_many_histories():
    flagged = sum(r.status == "drift" for s in range(30) for r in detect_drift(history(15, seed=s)))
    assert flagged == 0  # 360 judged constants, 2 % noise, thresholds z > 5 and > 10 %


def test_an_outlier_night_in_the_baseline_does_not_mask_a_drift():
    # a mean/std baseline would be dragged by the ×3 night; the median/MAD one is not
    res = detect_drift(history(20, outlier_run=15, drift={"c5": 0.75}))
    assert {r.constant for r in res if r.status == "drift"} == {"c5"}


def test_warming_up_until_min_history():
    res = detect_drift(history(4, drift={"c1": 0.1}))
    assert {r.status for r in res} == {"warming up"} and res[0].n_baseline == 3


def test_latest_run_selects_the_night():
    h = history(20, drift={"c2": 0.5})
    assert {r.constant for r in detect_drift(h) if r.status == "drift"} == {"c2"}
    assert not [r for r in detect_drift(h, latest_run="r018") if r.status == "drift"]


def test_robust_z_by_hand():
    # baseline 10, 11, 12, 13, 100: median 12, |dev| 2, 1, 0, 1, 88 -> MAD 1, σ̂ = 1.4826
    m, mad, z = robust_z(15.0, np.array([10.0, 11.0, 12.0, 13.0, 100.0]))
    assert (m, mad) == (12.0, 1.0) and z == pytest.approx(3.0 / 1.4826)
    assert robust_z(5.0, np.array([5.0, 5.0]))[2] == 0.0
    assert math.isinf(robust_z(6.0, np.array([5.0, 5.0]))[2])


def test_constant_baseline_needs_the_min_change_too():
    h = history(12)
    h.loc[h["constant"] == "c0", "value"] = 1.0
    h.loc[(h["constant"] == "c0") & (h["run_id"] == "r011"), "value"] = 1.05  # z = inf, change 5 % < 10 %
    assert all(r.status == "ok" for r in detect_drift(h) if r.constant == "c0")


@pytest.mark.parametrize("kw, match", [({"baseline_runs": 0}, "--baseline-runs"), ({"min_history": 20}, "--min-history"),
                                       ({"z_threshold": -1.0}, "--drift-z"), ({"min_change": float("nan")}, "--drift-min-change")])
def test_bad_options(kw, match):
    with pytest.raises(HarnessError, match=match):
        DriftOptions(**kw)
