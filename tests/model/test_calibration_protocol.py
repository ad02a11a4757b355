"""The model owns the Calibration protocol: anything with its methods calibrates a plan, and no model
module imports harness.calibration (calibration depends on the model, never the other way; issue 14)."""

import ast

import pytest

from harness.model.calibration import ConstantProvenance, LinkConstants
from harness.model.plan import plan
from harness.model.stages import Efficiency
from harness.specs.scenario import load_scenario
from tests.conftest import ROOT, SCENARIOS


class FlatCalibration:
    """Every GPU at 45% compute / 40% bandwidth and the link at half its datasheet bandwidth."""

    source = "test-constants"
    machine = "nowhere"

    def efficiency(self, gpu, decode_batch, prefill_tokens, dtype, which="value", decode_context_tokens=None):
        return Efficiency(0.45, 0.40, f"stub {which}")

    def link(self, name, which="value"):
        return LinkConstants(12.5e9, 5e-6, f"{name} (stub)")

    def provenance(self, gpus, link_name, decode_batch, prefill_tokens, dtype, link_default, decode_context_tokens=None):
        return [ConstantProvenance(f"{g}.compute_efficiency", "measured", 0.45, None, None, None, "stub", ()) for g in gpus]


def test_any_object_with_the_protocol_calibrates_a_plan():
    s = load_scenario(SCENARIOS / "ch9-hetero-pd.toml")
    base, cal = plan(s, include_grid=False), plan(s, calibration=FlatCalibration(), include_grid=False)
    assert cal.stage_rates["h20-96gb"].efficiency.bandwidth == 0.40
    assert cal.kv.link == "nic-200g (stub)" and cal.kv.link_bandwidth_bytes_per_s == 12.5e9
    assert cal.pd.best.requests_per_s < base.pd.best.requests_per_s
    assert cal.calibration.machine == "nowhere" and len(cal.calibration.constants) == 2
    iv = cal.calibration.capacity_interval.pd_best_requests_per_s
    assert iv.value == pytest.approx(cal.pd.best.requests_per_s)


def test_no_model_module_imports_calibration():
    offenders = []
    for path in sorted((ROOT / "harness" / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("harness.calibration")]
    assert not offenders, offenders
