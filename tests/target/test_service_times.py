"""Stage times of the embedded target pin the chapter's numbers (Chapter 9, §9.2.3, example 9.2)."""

import pytest

from harness.model.stages import Efficiency
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model
from harness.target.service_times import GpuServiceModel

QWEN = get_model("qwen3-8b")


@pytest.fixture(scope="module")
def a100():
    return GpuServiceModel(get_gpu("a100-80gb-sxm"), QWEN, Efficiency())


@pytest.fixture(scope="module")
def h20():
    return GpuServiceModel(get_gpu("h20-96gb"), QWEN, Efficiency())


def test_prefill_8192_tokens(a100, h20):
    # chapter 9, §9.2.3: 0.856 s on A100, 1.81 s on H20 (example 9.2 table: 1.805)
    assert a100.prefill_s(8192) == pytest.approx(0.856, abs=0.001)
    assert h20.prefill_s(8192) == pytest.approx(1.805, abs=0.001)


def test_decode_step_at_batch_32(a100, h20):
    # chapter 9, §9.2.3: mean context 8192 + 512 = 8704; 55.1 ms on A100, 27.4 ms on H20
    assert a100.decode_step_s(32, 8704) == pytest.approx(0.0551, abs=0.0001)
    assert h20.decode_step_s(32, 8704) == pytest.approx(0.0274, abs=0.0001)


def test_partial_batches_and_cached_prefix_are_faster(a100, h20):
    assert h20.decode_step_s(8, 8704) < h20.decode_step_s(32, 8704)
    # §9.2.4: with 6144 of 8192 tokens cached, A100 prefill drops from 0.856 to 0.238 s
    assert a100.prefill_s(2048, 6144) == pytest.approx(0.238, abs=0.002)


def test_kv_bytes_per_request(h20):
    # chapter 9, §9.2.2: 144 KiB per token, 1.125 GiB for 8192 tokens
    assert h20.kv_bytes(8192) == pytest.approx(1.125 * 2**30)
