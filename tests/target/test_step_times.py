"""Step-time sources of the twin: the roofline with effective constants, the cache, and the adapter over an
engine-calibrated fit (intervals: the twin can run at the value or either bound)."""

from dataclasses import dataclass

import pytest

from harness.errors import HarnessError
from harness.model.forward import decode_step_work, prefill_work
from harness.specs.models import get_model
from harness.target.llama_server import UBatch, ubatch_time_s
from harness.target.step_times import CachedStepTimes, CalibratedStepTimes, RooflineStepTimes, StepTimes

QWEN = get_model("qwen3-8b")


def test_roofline_is_max_of_terms():
    st = RooflineStepTimes(QWEN, 1e14, 1e12, 2.0, 2.0)
    w = prefill_work(QWEN, 512, 0, 2.0, 2.0)
    assert st.prefill_time_s(512) == pytest.approx(max(w.flops / 1e14, w.bytes / 1e12))  # Chapter 9, §9.2.3
    d = decode_step_work(QWEN, 8, 1000.0, 2.0, 2.0)
    assert st.decode_step_time_s(8, 1000) == pytest.approx(max(d.flops / 1e14, d.bytes / 1e12))
    assert isinstance(st, StepTimes)
    with pytest.raises(HarnessError, match="flops_per_s"):
        RooflineStepTimes(QWEN, 0.0, 1e12)


def test_cache_rounds_context_to_the_grid():
    st = RooflineStepTimes(QWEN, 1e14, 1e12)
    c = CachedStepTimes(st)
    assert c.decode_step_time_s(8, 1001) == st.decode_step_time_s(8, 1008)
    assert c.prefill_time_s(100, 0) == st.prefill_time_s(100)
    assert c.to_dict()["kind"] == "roofline"  # the source's own description passes through


@dataclass
class Iv:
    value: float
    low: float
    high: float


class FakeFit:
    notes = ("PROXY: test",)

    def prefill_s(self, p, cached=0):
        return Iv(1e-3 * p, 0.9e-3 * p, 1.1e-3 * p)

    def decode_step_s(self, b, ctx):
        return Iv(0.02, 0.019, 0.021)

    def mixed_step_s(self, d, ctx, p, cached=0):
        return Iv(0.02 + 1e-3 * p, 0.0, 1.0)


def test_calibrated_adapter_picks_the_bound_and_uses_the_mixed_rule():
    v = CalibratedStepTimes(FakeFit(), "cal.json", {"family": "ggml-q4_K_M-cpu", "threads": 2})
    hi = CalibratedStepTimes(FakeFit(), "cal.json", {}, bound="high")
    assert v.prefill_time_s(100) == pytest.approx(0.1) and hi.prefill_time_s(100) == pytest.approx(0.11)
    assert "PROXY: test" in v.source and v.to_dict()["kind"] == "calibrated"
    # a mixed micro-batch (unified KV) takes the fit's own mixed-step rule
    u = UBatch(((0, 1, 10, False), (1, 50, 0, True)))
    assert ubatch_time_s(u, CachedStepTimes(v)) == pytest.approx(0.02 + 1e-3 * 50)
    with pytest.raises(HarnessError, match="bound"):
        CalibratedStepTimes(FakeFit(), "x", {}, bound="mid")
