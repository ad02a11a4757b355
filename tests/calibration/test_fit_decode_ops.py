"""The decode bandwidth curve is fitted from the fused decode steps when measured; the eager-ops ones are a baseline."""

import dataclasses
import json

import pandas as pd
import pytest

from harness.calibration.fit import fit_calibration
from harness.calibration.runs import load_machine_runs
from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run
from microbench.params import OPS_EAGER, OPS_FUSED, parse_params

GPU = SyntheticMachine(noise_cv=0.002, n_samples=8, suites=("decode",), decode_context=4096, decode_mbu=(0.40,) * 7)
FUSED_SPEEDUP = 1.5


def _run(tmp_path, *, eager_ops: str | None, fused: bool):
    """A synthetic decode run: its step rows get `ops` = eager_ops (None: written before the field existed); with
    `fused`, a copy of every step row as the fused case, FUSED_SPEEDUP times faster."""
    path = write_synthetic_run(tmp_path, GPU, 1)
    part = next((path / "micro_cases").glob("*.parquet"))
    df = pd.read_parquet(part)

    def with_ops(params_json: str, ops: str | None) -> str:
        p = json.loads(params_json)
        if ops is None:
            p.pop("ops", None)
        else:
            p["ops"] = ops
        return json.dumps(p, sort_keys=True)

    df = df.assign(params_json=[with_ops(p, eager_ops) for p in df["params_json"]])
    if fused:
        f = df.copy()
        f["case"] = [c.replace("step-", "step-fused-") for c in f["case"]]
        f["case_id"] = [c.replace("step-", "step-fused-") for c in f["case_id"]]
        f["params_json"] = [with_ops(p, OPS_FUSED) for p in f["params_json"]]
        for col in ("median_s", "p10_s", "p90_s", "mean_s", "min_s"):
            f[col] = f[col] / FUSED_SPEEDUP
        for col in ("bytes_per_s", "flops_per_s", "mbu", "mfu"):
            f[col] = f[col] * FUSED_SPEEDUP
        df = pd.concat([df, f], ignore_index=True)
        samples = next((path / "micro_samples").glob("*.parquet"))
        s = pd.read_parquet(samples)
        fs = s.assign(case_id=[c.replace("step-", "step-fused-") for c in s["case_id"]], time_s=s["time_s"] / FUSED_SPEEDUP)
        pd.concat([s, fs], ignore_index=True).to_parquet(samples)
    df.to_parquet(part)
    return fit_calibration(load_machine_runs(tmp_path / GPU.machine), n_bootstrap=20)


def test_curve_takes_the_fused_steps_when_both_were_measured(tmp_path):
    rec = _run(tmp_path, eager_ops=OPS_EAGER, fused=True)
    c = rec.curve("h200-sxm", "decode_bandwidth_efficiency", "bf16")
    assert all(p.measured.value == pytest.approx(0.40 * FUSED_SPEEDUP, rel=0.02) for p in c.points)
    assert all(all("-fused-" in cid for cid in p.case_ids) for p in c.points)
    assert any("fitted from the fused decode steps" in w and "baseline" in w for w in rec.warnings)


def test_curve_takes_old_eager_rows_with_a_note_when_no_fused_step_exists(tmp_path):
    rec = _run(tmp_path, eager_ops=None, fused=False)  # a run written before DecodeParams had `ops`
    c = rec.curve("h200-sxm", "decode_bandwidth_efficiency", "bf16")
    assert all(p.measured.value == pytest.approx(0.40, rel=0.02) for p in c.points)
    assert any("only eager-ops decode steps" in w and "lower bound" in w for w in rec.warnings)


def test_eager_ops_value_round_trips():
    from microbench.params import DecodeParams

    p = DecodeParams(model="qwen3-8b", kind="step", batch=1, context_tokens=4096, ops=OPS_EAGER)
    assert parse_params(p.to_params()) == p
