"""CPU vs GPU expert execution (Chapter 9, §9.3.2, example 9.3, Fig. 9-14/9-15, worked solution)."""

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.model.experts_cpu_gpu import (
    ExpertHardware,
    ExpertShape,
    balance_tokens,
    batch_expert_times,
    cpu_expert_time,
    crossover_tokens,
    expert_shape,
    gpu_expert_time,
    path_times_s,
)
from harness.specs.cpus import get_cpu
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model

MiB = 2**20
CPU = get_cpu("xeon-platinum-8452y")
GPU = get_gpu("a100-40gb-pcie")


@pytest.fixture(scope="module")
def shape():
    return expert_shape(get_model("qwen3-235b-a22b"))


def hw(kernel="avx512", numa="local"):
    # example 9.3: A100 40GB PCIe at 50 % (156 TFLOP/s, 778 GB/s), PCIe 4.0 at 25 GB/s, 5 µs per launch
    return ExpertHardware(CPU.flops_per_s(kernel), CPU.dram_bandwidth_bytes_per_s(numa),
                          0.5 * GPU.peak_bf16_flops_per_s, 0.5 * GPU.hbm_bandwidth_bytes_per_s, 25e9, 5e-6)


def test_expert_shape_of_qwen3_235b(shape):
    # §9.3.2: 3×4096×1536 = 18,874,368 parameters, 36 MiB in BF16
    assert shape.params == 18_874_368
    assert shape.weight_bytes == 36 * MiB
    assert expert_shape(get_model("qwen3-235b-a22b"), weight_bytes_per_param=1.0).weight_bytes == 18 * MiB


def test_one_token_per_expert(shape):
    # example 9.3: eight experts, one token each -> CPU 1.37 ms read, 1.46 ms path; GPU 12.1 ms transfer, 12.5 ms path
    b = batch_expert_times([1] * 8, shape, hw())
    assert b.weight_bytes == 288 * MiB
    assert b.cpu_weight_read_s == pytest.approx(1.37e-3, abs=0.005e-3)
    assert b.cpu_s == pytest.approx(1.46e-3, abs=0.005e-3)
    assert b.gpu_weight_transfer_s == pytest.approx(12.1e-3, abs=0.05e-3)
    assert b.gpu_s == pytest.approx(12.5e-3, abs=0.05e-3)
    assert b.faster == "cpu"


def test_128_tokens_per_expert_avx512_and_amx(shape):
    # example 9.3: AVX-512 ≈22.2 ms vs GPU ≈12.5 ms; AMX ≈2.57 ms, about a fifth of the GPU path
    avx = batch_expert_times([128] * 8, shape, hw("avx512"))
    amx = batch_expert_times([128] * 8, shape, hw("amx"))
    assert avx.cpu_s == pytest.approx(22.2e-3, abs=0.05e-3)
    assert avx.gpu_s == pytest.approx(12.5e-3, abs=0.05e-3)
    assert avx.faster == "gpu"
    assert amx.cpu_s == pytest.approx(2.57e-3, abs=0.005e-3)
    assert amx.faster == "cpu"
    assert amx.gpu_s / amx.cpu_s == pytest.approx(5, rel=0.05)
    # Fig. 9-15: 38.7 GFLOPs of matmul, 288 MiB of weights
    assert avx.flops == pytest.approx(38.7e9, abs=0.05e9)


def test_crossovers_71_72_and_688_689(shape):
    # Fig. 9-14 and footnote 9: GPU overtakes between 71 and 72 tokens (AVX-512), 688 and 689 (AMX)
    a = crossover_tokens(shape, hw("avx512"))
    m = crossover_tokens(shape, hw("amx"))
    assert (a.last_cpu_tokens, a.first_gpu_tokens) == (71, 72)
    assert (m.last_cpu_tokens, m.first_gpu_tokens) == (688, 689)
    for c, h in ((a, hw("avx512")), (m, hw("amx"))):
        assert cpu_expert_time(c.last_cpu_tokens, shape, h).total_s <= gpu_expert_time(c.last_cpu_tokens, shape, h).total_s
        assert gpu_expert_time(c.first_gpu_tokens, shape, h).total_s < cpu_expert_time(c.first_gpu_tokens, shape, h).total_s


def test_crossover_agrees_with_brute_force(shape):
    for h in (hw("avx512"), hw("amx"), hw("amx", "remote")):
        m = np.arange(0, 5000)
        t_c, t_g = path_times_s(m, shape, h)
        first = int(np.flatnonzero(t_g < t_c)[0])
        assert crossover_tokens(shape, h).first_gpu_tokens == first


def test_no_crossover_when_the_gpu_link_is_hopeless(shape):
    # a GPU with a tenth of the CPU's FLOP/s: shipping weights never pays, at any token count
    slow = ExpertHardware(1e13, 1e13, 1e12, 1e12, 25e9, 5e-6)
    assert crossover_tokens(shape, slow) is None


def test_balance_points_of_the_worked_solution(shape):
    # after the exercises: m = C_C/B_D -> ≈8.2 (AVX-512), ≈97 (AMX); cross-socket ≈14 and ≈170
    assert balance_tokens(shape, 1.8e12, 220e9) == pytest.approx(8.2, abs=0.05)
    assert balance_tokens(shape, 21.3e12, 220e9) == pytest.approx(97, abs=0.5)
    assert balance_tokens(shape, 1.8e12, 125e9) == pytest.approx(14, abs=0.5)
    assert balance_tokens(shape, 21.3e12, 125e9) == pytest.approx(170, abs=0.5)
    # exercise 9-3: one byte per weight halves the balance point at the same compute
    s8 = expert_shape(get_model("qwen3-235b-a22b"), weight_bytes_per_param=1.0)
    assert balance_tokens(s8, 1.8e12, 220e9) == pytest.approx(balance_tokens(shape, 1.8e12, 220e9) / 2)


def test_cross_socket_read_is_76_percent_slower(shape):
    # worked solution: one row, cross-socket weight read +76 %; at 128 rows AVX-512 stays compute-bound
    local = cpu_expert_time(1, shape, hw("avx512", "local"))
    remote = cpu_expert_time(1, shape, hw("avx512", "remote"))
    assert remote.weight_read_s / local.weight_read_s - 1 == pytest.approx(0.76, abs=0.005)
    assert cpu_expert_time(128, shape, hw("avx512", "remote")).bound == "compute"
    assert cpu_expert_time(128, shape, hw("amx", "remote")).bound == "memory"  # Fig. 9-15: AMX cross-socket waits on reads


def test_idle_experts_cost_nothing_and_best_placement_mixes(shape):
    b = batch_expert_times([0, 1, 2000], shape, hw("avx512"))
    assert b.experts_run == 2
    assert b.placement == ("cpu", "cpu", "gpu")
    assert b.best_s < min(b.cpu_s, b.gpu_s)


def test_bad_inputs_are_refused(shape):
    with pytest.raises(HarnessError, match=r"tokens_per_expert\[1\] must be a finite number of tokens >= 0, got -3"):
        batch_expert_times([1, -3], shape, hw())
    with pytest.raises(HarnessError, match="tokens must be"):
        cpu_expert_time(float("nan"), shape, hw())
    with pytest.raises(HarnessError, match="link_bandwidth_bytes_per_s must be a positive"):
        ExpertHardware(1, 1, 1, 1, 0, 0)
    with pytest.raises(HarnessError, match="has no routed experts"):
        expert_shape(get_model("qwen3-8b"))
    with pytest.raises(HarnessError, match="params must be a positive integer"):
        ExpertShape(0, 4096, 2.0)
