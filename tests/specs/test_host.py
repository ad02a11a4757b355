"""The detected host spec: derived peaks state their source; declared peaks are validated."""

import pytest

from harness.errors import HarnessError
from harness.specs.host import ENV_MEM_BW, ENV_PEAK_FP32, detect_host, flops_per_cycle_per_core


def test_flops_per_cycle_by_isa():
    assert flops_per_cycle_per_core({"avx512f", "amx_bf16"}, "bf16") == (1024.0, "AMX-BF16")
    assert flops_per_cycle_per_core({"avx512f"}, "fp32")[0] == 64.0
    assert flops_per_cycle_per_core({"avx2", "fma"}, "bf16")[0] == 32.0


def test_detect_host_states_sources(monkeypatch):
    monkeypatch.delenv(ENV_PEAK_FP32, raising=False)
    monkeypatch.delenv(ENV_MEM_BW, raising=False)
    h = detect_host()
    assert h.usable_cores >= 1 and "fp32 peak" in h.source and "memory bandwidth not declared" in h.source
    assert h.memory_bandwidth_bytes_per_s is None


def test_declared_peaks_win_and_are_validated(monkeypatch):
    monkeypatch.setenv(ENV_PEAK_FP32, "1.8e12")
    monkeypatch.setenv(ENV_MEM_BW, "220e9")
    h = detect_host()
    assert h.peak_flops_per_s("fp32") == 1.8e12 and h.memory_bandwidth_bytes_per_s == 220e9
    monkeypatch.setenv(ENV_MEM_BW, "fast")
    with pytest.raises(HarnessError, match=ENV_MEM_BW):
        detect_host()
