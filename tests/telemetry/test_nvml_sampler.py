"""The NVML sampler on a fake NVML: only the GPUs in use, HBM temperature, per-case throttle verdicts."""

import time
from types import SimpleNamespace

import pytest

from harness.telemetry.nvml import (
    GPU_IDLE,
    POWER_NOTE,
    SW_THERMAL,
    CaseWindow,
    NvmlSample,
    NvmlSampler,
    verdicts_by_case,
)


class FakeNvml:
    """pynvml's calls the sampler makes, for `n` GPUs; GPU 1 throttles (thermal bit) when `hot` is set."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self, n=4):
        self.n, self.hot, self.asked = n, False, []

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        self.asked.append(i)
        return i

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980 if kind == 0 else 3201

    def nvmlDeviceGetPowerUsage(self, h):
        return 650_000  # mW

    def nvmlDeviceGetTemperature(self, h, kind):
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return SW_THERMAL if (self.hot and h == 1) else 0

    def nvmlDeviceGetFieldValues(self, h, ids):
        val = {82: 48, 186: 700_000}
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=val[i])) for i in ids]


def test_only_the_gpus_in_use_are_sampled_with_hbm_temperature_and_both_powers():
    nv = FakeNvml(4)
    sm = NvmlSampler(0.01, gpu_indices=[1], nv=nv)
    sm.sample_once()
    assert set(nv.asked) == {1}
    (s,) = sm.samples
    assert s.gpu_index == 1 and s.memory_temperature_c == 48.0 and s.temperature_c == 61.0
    assert s.power_w == 650.0 and s.power_instant_w == 700.0
    assert "1 s" in POWER_NOTE and "Hopper" in POWER_NOTE


def test_a_board_without_the_fields_records_none():
    nv = FakeNvml(1)
    nv.nvmlDeviceGetFieldValues = lambda h, ids: (_ for _ in ()).throw(RuntimeError("NVML_ERROR_NOT_SUPPORTED"))
    sm = NvmlSampler(0.01, nv=nv)
    sm.sample_once()
    assert sm.samples[0].memory_temperature_c is None and sm.samples[0].power_instant_w is None


def test_throttling_is_blamed_on_the_case_it_overlapped():
    nv = FakeNvml(2)
    sm = NvmlSampler(0.01, gpu_indices=[1], nv=nv)
    with sm.window("gemm:cool"):
        sm.sample_once()
    time.sleep(0.03)  # beyond one period: the next sample belongs to the next case only
    with sm.window("gemm:hot"):
        nv.hot = True
        sm.sample_once()
        nv.hot = False
    v = sm.case_verdicts()
    assert not v["gemm:cool"].throttled
    assert v["gemm:hot"].throttled and v["gemm:hot"].thermal


def s(t, mhz, reasons=0):
    return NvmlSample(t, 0, mhz * 1e6, 3201e6, 500.0, 60.0, reasons)


def test_a_case_run_at_a_lower_clock_is_flagged_against_the_run_peak():
    samples = [s(0.0, 1980), s(0.1, 1980), s(1.0, 1600), s(1.1, 1600), s(2.0, 345, GPU_IDLE)]
    windows = [CaseWindow("a", 0.0, 0.15), CaseWindow("b", 0.95, 1.15), CaseWindow("idle", 1.95, 2.05)]
    v = verdicts_by_case(samples, windows)
    assert not v["a"].throttled
    assert v["b"].throttled and v["b"].sm_clock_drop == pytest.approx(1 - 1600 / 1980)
    assert not v["idle"].throttled and v["idle"].busy_samples == 0


def test_a_case_without_samples_gets_no_verdict():
    assert verdicts_by_case([s(5.0, 1980)], [CaseWindow("short", 0.0, 0.01)]) == {}
