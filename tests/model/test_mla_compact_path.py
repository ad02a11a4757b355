"""The compact MLA path's extra FLOPs on the D pool (Chapter 9, §9.2.3 after example 9.2, footnote 7)."""

import pytest

from harness.errors import HarnessError
from harness.model.kv import kv_bytes, transfers_per_s
from harness.model.mla_compact_path import compact_path_d_pool_effect, compact_path_flops_per_token
from harness.model.stages import Workload, stage_rates
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model

GPUS = ["a100-80gb-sxm", "h20-96gb"]


def test_extra_flops_per_request_step():
    # footnote 7: 2,046,820,352 FLOPs per step (2·61·128·512·(128+128))
    assert compact_path_flops_per_token(get_model("deepseek-v3")) == 2_046_820_352
    with pytest.raises(HarnessError, match="needs an MLA model"):
        compact_path_flops_per_token(get_model("qwen3-8b"))


@pytest.fixture(scope="module")
def effect():
    qwen = get_model("qwen3-8b")
    rates = [stage_rates(get_gpu(g), qwen, Workload(8192, 1025)) for g in GPUS]
    link = transfers_per_s(kv_bytes(get_model("deepseek-v3"), 8192, 2.0), 25e9, 5e-6)
    return compact_path_d_pool_effect(
        GPUS, [4, 4], [r.prefill_s_per_request for r in rates], [r.decode_s_per_request for r in rates],
        1024, 2_046_820_352, [0.5 * get_gpu(g).peak_bf16_flops_per_s for g in GPUS], 3.5, link,
    )


def test_d_pool_effect_of_example_9_2(effect):
    # §9.2.3: 27.7 µs per request-step on H20 (74 TFLOP/s), 28.3 ms over 1024 steps;
    # 0.878 -> ≈0.907 GPU-s per request, 4.55 -> ≈4.41 req/s, still above 3.5
    assert effect.extra_s_per_request_step["h20-96gb"] == pytest.approx(27.7e-6, abs=0.05e-6)
    assert effect.extra_s_per_request["h20-96gb"] == pytest.approx(28.3e-3, abs=0.05e-3)
    assert effect.decode_s_per_request_before["h20-96gb"] == pytest.approx(0.878, abs=0.0005)
    assert effect.decode_s_per_request_after["h20-96gb"] == pytest.approx(0.907, abs=0.001)
    assert effect.best_before.decode == {"a100-80gb-sxm": 0, "h20-96gb": 4}
    assert effect.best_after.decode == {"a100-80gb-sxm": 0, "h20-96gb": 4}
    assert effect.decode_pool_requests_per_s_before == pytest.approx(4.55, abs=0.005)
    assert effect.decode_pool_requests_per_s_after == pytest.approx(4.41, abs=0.005)
    assert effect.best_after.requests_per_s == pytest.approx(4.41, abs=0.005)
    assert effect.best_before.link_requests_per_s == pytest.approx(43.4, abs=0.05)  # §9.2.3: MLA link term


def test_fifth_card_threshold(effect):
    # §9.2.3: a fifth D card is needed only above ≈258 µs of extra work per request-step
    x = effect.max_extra_s_per_request_step
    assert x == pytest.approx(258e-6, abs=0.5e-6)
    d = effect.decode_s_per_request_before["h20-96gb"]
    assert 4 / (d + 1024 * x) == pytest.approx(3.5, rel=1e-9)


def test_threshold_for_a_mixed_d_pool_by_bisection():
    e = compact_path_d_pool_effect(
        ["a", "b"], [2, 3], [1.0, 1.0], [2.0, 1.0], 100, 0.0, [1e12, 1e12], 1.0,
    )
    dpool = e.best_before.decode
    x = e.max_extra_s_per_request_step
    rate = sum(n / ({"a": 2.0, "b": 1.0}[g] + 100 * x) for g, n in dpool.items() if n)
    assert rate == pytest.approx(1.0, rel=1e-9)


def test_bad_inputs():
    with pytest.raises(HarnessError, match="one entry per GPU type"):
        compact_path_d_pool_effect(["a"], [1, 2], [1.0], [1.0], 10, 1.0, [1.0], 1.0)
    with pytest.raises(HarnessError, match="decode_calls_per_request must be an integer >= 1"):
        compact_path_d_pool_effect(["a"], [2], [1.0], [1.0], 0, 1.0, [1.0], 1.0)
