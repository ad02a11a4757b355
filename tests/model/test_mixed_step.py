"""Chunked prefill from a measured mixed step (Chapter 9, §9.2.3): hinge fit and the capacity bound it feeds."""

import random
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.model.mixed_step import chunked_colocated_rate_measured, chunked_rate, chunked_s_per_request, fit_hinge
from harness.model.plan import stage_rates_of, workload_of
from harness.specs.models import get_model
from harness.specs.scenario import load_scenario

SCEN = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def _rates_of(name):
    s = load_scenario(SCEN / f"{name}.toml")
    return stage_rates_of(s, get_model(s.workload.model), workload_of(s)), [p.count for p in s.pools]


def test_fit_recovers_the_chapter_a100_knee():
    # synthetic A100 mixed step: 55.1 ms decode, 490 tokens hidden, then 0.856 s / 8192 tokens each (§9.2.3)
    rng = random.Random(3)
    cs = [0, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048]
    ts = [55.1e-3 + 0.856 / 8192 * max(0, c - 490) + rng.gauss(0, 0.2e-3) for c in cs]
    f = fit_hinge(cs, ts)
    assert f.hidden_tokens == pytest.approx(490, rel=0.03)
    assert f.per_token_s == pytest.approx(0.856 / 8192, rel=0.03)
    assert f.base_step_s == pytest.approx(55.1e-3, abs=0.5e-3) and f.points == len(cs)


def test_fit_flat_and_linear_extremes():
    assert fit_hinge([0, 100, 200], [1.0, 1.0, 1.0]).hidden_tokens == 200  # nothing added time: all hidden
    f = fit_hinge([0, 100, 200, 400], [1.0, 2.0, 3.0, 5.0])  # every token costs from the first
    assert f.hidden_tokens == pytest.approx(0) and f.per_token_s == pytest.approx(0.01)


@pytest.mark.parametrize("cs,ts,match", [
    ([0, 1], [1.0, 1.0], "at least 3"),
    ([10, 20, 30], [1.0, 1.0, 1.0], "no chunk size 0"),
    ([0, 10, 20], [1.0, -1.0, 1.0], "step times > 0"),
    ([0, 10], [1.0, 1.0, 1.0], "one time per chunk size"),
])
def test_fit_rejects_bad_input(cs, ts, match):
    with pytest.raises(HarnessError, match=match):
        fit_hinge(cs, ts)


def test_model_h_reproduces_the_chapter_chunked_bounds():
    # §9.2.3: ideal chunked colocation 4.50 req/s for 8×A100 and 4.17 for 4 A100 + 4 H20; this form ignores the
    # prefill's own weight reads, so it sits within 1 % above the chapter's max(compute, memory) figures
    for name, chapter in (("ch9-homog-a100", 4.50), ("ch9-hetero-pd", 4.17)):
        rates, counts = _rates_of(name)
        mu = chunked_colocated_rate_measured(rates, counts, [r.hidden_prefill_tokens_per_decode_step for r in rates])
        assert mu == pytest.approx(chapter, rel=0.01)


def test_nothing_hidden_is_unchunked_colocation():
    # h = 0: every prefill token costs its full time: the colocated 3.05 / 3.02 req/s of §9.2.3
    for name, chapter in (("ch9-homog-a100", 3.05), ("ch9-hetero-pd", 3.02)):
        rates, counts = _rates_of(name)
        assert chunked_colocated_rate_measured(rates, counts, [0.0] * len(rates)) == pytest.approx(chapter, abs=0.01)


def test_h20_hides_little():
    # §9.2.3: ≈85 tokens per H20 step: 32 steps hide 2720 of 8192 tokens, the rest cost 1.805 s × 5472/8192
    rates, _ = _rates_of("ch9-hetero-pd")
    h20 = next(r for r in rates if r.gpu == "h20-96gb")
    t = 1 / chunked_rate(h20, 85)
    assert t == pytest.approx(0.878 + 1.805 * (8192 - 85 * 32) / 8192, rel=0.005)


def test_chunked_bound_validates():
    with pytest.raises(HarnessError, match="hidden_tokens_per_step"):
        chunked_s_per_request(0.05, 32, 1024, 8192, 1e-4, -1)
    with pytest.raises(HarnessError, match="decode_step_s"):
        chunked_s_per_request(0.0, 32, 1024, 8192, 1e-4, 10)
    rates, counts = _rates_of("ch9-hetero-pd")
    with pytest.raises(HarnessError, match="one count"):
        chunked_colocated_rate_measured(rates, counts, [1.0])
