"""Layer-wise prefetch (Chapter 9, §9.5.2, Fig. 9-32 – 9-34)."""

import pytest

from harness.errors import HarnessError
from harness.model.kv import kv_bytes
from harness.model.kv_prefetch import (
    hiding_new_tokens,
    layer_pipeline,
    layers_to_preload,
    min_preloaded_layers,
    prefetch_buffer_bytes,
    read_then_compute,
)
from harness.model.stages import Workload, stage_rates
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model
from harness.units import MiB

Q8 = get_model("qwen3-8b")
A100 = get_gpu("a100-80gb-sxm")
V = kv_bytes(Q8, 8192, 2)
T_HOST = V / 25e9  # 48.3 ms over PCIe 4.0 x16
T_REMOTE = 2 * V / 25e9  # NIC, then PCIe
T_SSD = V / 7.1e9
LAYER = V / 36  # 32 MiB


def new_s(n: int) -> float:
    return stage_rates(A100, Q8, Workload(8192 + n, 1, 8192, 1)).prefill_s_per_request


T_NEW = new_s(256)  # 30.9 ms (example 9.7)


def test_three_strategies():
    # Fig. 9-32/33/34: 79.2 ms, 49.2 ms (1.34 ms read vs 0.857 ms compute per layer), 30.9 ms with 14 layers
    assert T_NEW == pytest.approx(30.9e-3, abs=0.05e-3)
    assert LAYER == 32 * MiB
    assert read_then_compute(36, T_HOST, T_NEW).total_s == pytest.approx(79.2e-3, abs=0.1e-3)
    p0 = layer_pipeline(36, T_HOST, T_NEW)
    assert p0.read_per_layer_s == pytest.approx(1.34e-3, abs=0.005e-3)
    assert p0.compute_per_layer_s == pytest.approx(0.857e-3, abs=0.001e-3)
    assert p0.total_s == pytest.approx(49.2e-3, abs=0.1e-3) and p0.bound == "read"
    p14 = layer_pipeline(36, T_HOST, T_NEW, 14)
    assert p14.total_s == pytest.approx(T_NEW) and p14.bound == "compute"
    assert layer_pipeline(36, T_HOST, T_NEW, 13).bound == "read"


def test_buffer_and_layers():
    # §9.5.2: S_buf = 25 GB/s × (48.3 − 30.9) ms ≈ 437 MB, a little over 13 layers -> 14 (448 MiB)
    buf = prefetch_buffer_bytes(25e9, T_HOST, T_NEW)
    assert buf == pytest.approx(437e6, rel=2e-3)
    assert 13 < buf / LAYER < 13.1
    assert layers_to_preload(buf, LAYER) == 14
    assert min_preloaded_layers(36, T_HOST, T_NEW) == 14  # the simulated timeline agrees with the closed form
    assert 14 * LAYER == 448 * MiB
    assert prefetch_buffer_bytes(25e9, T_NEW, T_HOST) == 0  # compute already hides the read


def test_ssd_layers():
    # §9.5.2: one SSD layer 4.73 ms, 5.5× a layer's compute; per-layer from SSD ≈171 ms
    p = layer_pipeline(36, T_SSD, T_NEW)
    assert p.read_per_layer_s == pytest.approx(4.73e-3, abs=0.005e-3)
    assert p.read_per_layer_s / p.compute_per_layer_s == pytest.approx(5.5, abs=0.05)
    assert p.total_s == pytest.approx(171e-3, abs=0.5e-3)


def test_new_tokens_that_hide_the_read():
    # §9.5.2: compute hides the read from ≈400 new tokens (host), ≈800 (remote pool), ≈1400 (SSD); 2 % tolerance
    assert hiding_new_tokens(T_HOST, new_s) == pytest.approx(400, rel=0.02)
    assert hiding_new_tokens(T_REMOTE, new_s) == pytest.approx(800, rel=0.02)
    assert hiding_new_tokens(T_SSD, new_s) == pytest.approx(1400, rel=0.02)
    n = hiding_new_tokens(T_HOST, new_s)
    assert new_s(n) >= T_HOST > new_s(n - 1)  # the smallest such count
    assert hiding_new_tokens(10.0, new_s, max_tokens=1024) is None


def test_validation():
    with pytest.raises(HarnessError, match="preloaded_layers"):
        layer_pipeline(36, T_HOST, T_NEW, 37)
    with pytest.raises(HarnessError, match="layers must be a positive integer"):
        read_then_compute(0, T_HOST, T_NEW)


def test_layers_that_hide_the_read_falls_back_to_the_simulation():
    from harness.model.kv_prefetch import layer_pipeline, layers_that_hide_the_read, min_preloaded_layers

    # 36 layers, read 48.3 ms, compute 40 ms: ⌈36·8.3/48.3⌉ = 7 by the formula; the simulation needs 8
    closed = layers_to_preload(25e9 * (48.3e-3 - 40e-3), 48.3e-3 * 25e9 / 36)
    assert closed == 7 and layer_pipeline(36, 48.3e-3, 40e-3, closed).bound == "read"
    assert layers_that_hide_the_read(36, 48.3e-3, 40e-3, closed) == min_preloaded_layers(36, 48.3e-3, 40e-3) == 8
    assert layers_that_hide_the_read(36, T_HOST, T_NEW, 14) == 14  # Fig. 9-34: the formula already hides it
