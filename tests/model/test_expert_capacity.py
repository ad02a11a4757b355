"""Expert capacity and reuse (Chapter 9, §9.3.3)."""

import pytest

from harness.errors import HarnessError
from harness.model.expert_capacity import batch_reuse, resident_expert_memory
from harness.model.experts_cpu_gpu import expert_shape
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model

GiB, MiB = 2**30, 2**20
MODEL = get_model("qwen3-235b-a22b")
W_E = expert_shape(MODEL).weight_bytes


def test_resident_experts_do_not_fit_an_a100_80gb():
    # §9.3.3: all 128 experts of a layer 4.5 GiB; 32 resident per layer 1.125 GiB, ≈106 GiB over 94
    # layers, more than the ≈74.5 GiB of an A100 80GB; 16 per layer ≈53 GiB
    free = get_gpu("a100-80gb-sxm").hbm_capacity_bytes
    r32 = resident_expert_memory(W_E, 128, 32, MODEL.n_moe_layers, free)
    assert r32.all_experts_per_layer_bytes == 4.5 * GiB
    assert r32.resident_per_layer_bytes == 1.125 * GiB
    assert r32.resident_all_layers_bytes / GiB == pytest.approx(106, abs=0.5)
    assert free / GiB == pytest.approx(74.5, abs=0.05)
    assert not r32.fits
    r16 = resident_expert_memory(W_E, 128, 16, MODEL.n_moe_layers, free)
    assert r16.resident_all_layers_bytes / GiB == pytest.approx(53, abs=0.5)
    assert r16.fits
    assert r16.max_resident_per_layer == 22  # 22 × 36 MiB × 94 = 72.7 GiB ≤ 74.5 GiB < 23 × …


def test_batch_reuse_three_routings():
    # §9.3.3: 64 tokens × top-8 = 512 assignments, 19.3 GFLOPs; reads 4.5 GiB uniform, 288 MiB
    # concentrated (16× apart), random E[U] ≈126 experts ≈4.43 GiB; at 220 GB/s 22.0 ms vs 1.37 ms
    r = batch_reuse(128, 8, 64, 18_874_368, 2.0, 220e9)
    assert r.assignments == 512
    assert r.useful_flops == pytest.approx(19.3e9, abs=0.05e9)
    assert r.uniform.experts_touched == 128 and r.uniform.rows_per_touched_expert == 4
    assert r.uniform.weight_bytes == 4.5 * GiB
    assert r.concentrated.experts_touched == 8 and r.concentrated.rows_per_touched_expert == 64
    assert r.concentrated.weight_bytes == 288 * MiB
    assert r.uniform.weight_bytes / r.concentrated.weight_bytes == 16
    assert r.random.experts_touched == pytest.approx(126, abs=0.5)
    assert r.random.weight_bytes / GiB == pytest.approx(4.43, abs=0.005)
    assert r.uniform.read_s == pytest.approx(22.0e-3, abs=0.05e-3)
    assert r.concentrated.read_s == pytest.approx(1.37e-3, abs=0.005e-3)


def test_large_batches_saturate_at_every_expert():
    r = batch_reuse(128, 8, 4096, 18_874_368, 2.0)
    assert r.random.experts_touched == pytest.approx(128, abs=1e-6)
    assert r.uniform.experts_touched == 128
    assert r.random.read_s is None


def test_bad_routing_is_refused():
    with pytest.raises(HarnessError, match=r"top_k \(9\) exceeds n_experts \(8\)"):
        batch_reuse(8, 9, 64, 100, 2.0)
    with pytest.raises(HarnessError, match="tokens must be an integer >= 0, got -1"):
        batch_reuse(128, 8, -1, 100, 2.0)
    with pytest.raises(HarnessError, match=r"resident_per_layer must be an integer in \[0, n_experts\] = \[0, 128\], got 129"):
        resident_expert_memory(W_E, 128, 129, 94, 80e9)
