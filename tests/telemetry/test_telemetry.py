"""NVML throttle detection on synthetic samples; both telemetry parts degrade to a note without a GPU."""

import pytest

from harness.telemetry import nvml, nvtx_ranges
from harness.telemetry.nvml import GPU_IDLE, HW_THERMAL, SW_POWER_CAP, NvmlSample, NvmlSampler, throttle_verdict


def s(t, mhz, reasons=0):
    return NvmlSample(t, 0, mhz * 1e6, 3201e6, 500.0, 60.0, reasons)


def test_steady_clocks_not_throttled():
    v = throttle_verdict([s(0, 1980), s(0.1, 1975), s(0.2, 1980)])
    assert not v.throttled and v.sm_clock_drop == pytest.approx(5 / 1980)


def test_sm_clock_drop_over_10_percent_flagged():
    v = throttle_verdict([s(0, 1980), s(0.1, 1700)])
    assert v.throttled and v.sm_clock_drop == pytest.approx(1 - 1700 / 1980) and "SM clock dropped" in v.reasons[0]


def test_idle_samples_do_not_count():
    v = throttle_verdict([s(0, 345, GPU_IDLE), s(0.1, 1980), s(0.2, 1980)])
    assert not v.throttled and v.busy_samples == 2


def test_thermal_and_power_bits_flagged():
    assert throttle_verdict([s(0, 1980, HW_THERMAL)]).thermal
    v = throttle_verdict([s(0, 1980, SW_POWER_CAP)])
    assert v.power and v.throttled


def _no_gpu() -> bool:
    return not nvml.status()[0]


@pytest.mark.skipif(not _no_gpu(), reason="this machine has a GPU; the CPU-only degradation is tested where there is none")
def test_cpu_only_degrades_to_notes():
    ok, line = nvml.status()
    assert not ok and line.startswith("NVML unavailable")
    with NvmlSampler(0.01) as sm:
        pass
    assert sm.samples == [] and sm.verdict() is None and not sm.available
    assert nvml.gpu_facts() == {}
    assert not nvtx_ranges.enabled()
    with nvtx_ranges.nvtx_range("case"):
        x = 1
    assert x == 1


@pytest.mark.gpu
@pytest.mark.skipif(_no_gpu(), reason="needs an NVIDIA GPU with NVML (none on this machine)")
def test_sampler_reads_a_real_gpu():
    import time

    with NvmlSampler(0.05) as sm:
        time.sleep(0.3)
    assert len(sm.samples) >= 3 and sm.samples[0].sm_clock_hz > 0
