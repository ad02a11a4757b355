"""CPU spec catalog: the KTransformers machine of example 9.3, validation and lookups."""

import pytest

from harness.errors import HarnessError
from harness.specs.cpus import CPUS, CpuSpec, get_cpu


def test_xeon_8452y_carries_the_papers_measurements():
    # Chapter 9, example 9.3: 1.8 TFLOP/s AVX-512, 21.3 TFLOP/s AMX, 220 GB/s in-socket, 125 GB/s cross-socket
    c = get_cpu("xeon-platinum-8452y")
    assert c.flops_per_s("avx512") == 1.8e12
    assert c.flops_per_s("amx") == 21.3e12
    assert c.dram_bandwidth_bytes_per_s("local") == 220e9
    assert c.dram_bandwidth_bytes_per_s("remote") == 125e9
    assert c.cores_per_socket == 36
    assert "KTransformers" in c.source and "MLC" in c.source


def test_every_cpu_names_its_source():
    for c in CPUS.values():
        assert c.source


def test_unknown_cpu_kernel_and_numa_path_are_named():
    c = get_cpu("xeon-platinum-8452y")
    with pytest.raises(HarnessError, match="kernel 'sse'.*avx512, amx"):
        c.flops_per_s("sse")
    with pytest.raises(HarnessError, match="NUMA path 'far'.*local, remote"):
        c.dram_bandwidth_bytes_per_s("far")
    with pytest.raises(HarnessError, match="No CPU spec 'epyc'.*xeon-platinum-8452y"):
        get_cpu("epyc")


def test_bad_cpu_numbers_are_refused_with_the_field():
    with pytest.raises(HarnessError, match="amx_flops_per_s must be a positive"):
        CpuSpec("x", 8, 1e12, -1.0, 1e11, 1e11, 1e12, "test")
    with pytest.raises(HarnessError, match="cores_per_socket must be a positive integer"):
        CpuSpec("x", 0, 1e12, 1e12, 1e11, 1e11, 1e12, "test")
