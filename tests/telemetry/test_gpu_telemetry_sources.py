"""GPU telemetry sources: a DCGM exporter page (the real metric names and label layout) and local NVML (faked), read
into per-GPU samples in base units; an unreachable or wrong endpoint gives an error row, never an exception."""

from types import SimpleNamespace

import pytest
from fake_dcgm import FakeExporter, closed_port_url, exposition

from harness.telemetry import dcgm
from harness.telemetry.gpu_nvml import read_gpu
from harness.telemetry.gpu_sample import COLUMN_DTYPES, GpuSample, samples_frame, throttle_names
from harness.telemetry.nvml import GPU_IDLE, SW_POWER_CAP, SW_THERMAL

MIB = 2**20


def test_dcgm_page_gives_one_sample_per_gpu_in_base_units():
    got = dcgm.samples_from_text(exposition(2, util=87, throttle=True), t_s=3.5, role="decode", endpoint="http://x/metrics")
    assert [s.gpu for s in got] == ["0", "1"]
    a, b = got
    assert a.source == "dcgm" and a.role == "decode" and a.t_s == 3.5 and a.host == "node-7"
    assert a.uuid.startswith("GPU-00000000") and a.model_name == "NVIDIA H100 80GB HBM3"
    assert a.util_frac == pytest.approx(0.87) and a.sm_clock_hz == 1980e6 and a.mem_clock_hz == 2619e6
    assert a.power_w == 412.5 and a.temperature_c == 55 and a.memory_temperature_c == 40
    assert a.memory_used_bytes == 60000 * MIB and a.memory_total_bytes == (60000 + 20000 + 559) * MIB
    assert a.throttle_reasons == 0 and b.throttle_reasons == SW_THERMAL and b.sm_clock_hz == 1780e6
    assert throttle_names(b.throttle_reasons) == ["sw_thermal"]


def test_dcgm_page_without_the_optional_fields_and_the_newer_hostname_label():
    text = "\n".join(ln for ln in exposition(1, hostname_label="hostname").splitlines()
                     if "CLOCKS_EVENT" not in ln and "FB_FREE" not in ln and "MEMORY_TEMP" not in ln)
    (s,) = dcgm.samples_from_text(text, t_s=0.0, role="all", endpoint="u")
    assert s.host == "node-7" and s.throttle_reasons is None and s.memory_total_bytes is None and s.memory_temperature_c is None
    assert s.memory_used_bytes == 60000 * MIB  # the rest is still read


def test_unreachable_and_non_dcgm_endpoints_are_error_rows():
    url = closed_port_url()
    (row,) = dcgm.scrape(url, t_s=1.0, role="prefill", timeout_s=1.0)
    assert row.error and ("Connection refused" in row.error or "URLError" in row.error) and row.endpoint == url
    with FakeExporter() as ex:
        (row,) = dcgm.scrape(ex.url.replace("/metrics", "/other"), t_s=1.0, role="all")
        assert "HTTPError" in row.error
    assert dcgm.samples_from_text("# a vLLM page\nvllm:num_requests_running 3\n", t_s=0, role="all", endpoint="u") == []


def test_the_stored_frame_has_one_schema_even_when_every_field_is_empty():
    df = samples_frame([GpuSample(t_s=1.0, source="dcgm", role="all", endpoint="u", error="refused")])
    assert {c: str(t) for c, t in df.dtypes.items()} == {c: ("string" if t == "string" else t) for c, t in COLUMN_DTYPES.items()}
    full = samples_frame(dcgm.samples_from_text(exposition(1), t_s=0.0, role="all", endpoint="u"))
    assert list(full.dtypes) == list(df.dtypes)


class FakeNvml:
    """pynvml's calls for `n` GPUs; `unsupported` names calls that raise as NVML_ERROR_NOT_SUPPORTED does."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self, n=2, unsupported=()):
        self.n, self.unsupported, self.reasons = n, set(unsupported), 0

    def __getattribute__(self, name):
        if name.startswith("nvmlDevice") and name in object.__getattribute__(self, "unsupported"):
            def fail(*a):
                raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
            return fail
        return object.__getattribute__(self, name)

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=93, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=70 * 2**30, total=80 * 2**30, free=10 * 2**30)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1755 if kind == 0 else 2619

    def nvmlDeviceGetPowerUsage(self, h):
        return 612_000

    def nvmlDeviceGetTemperature(self, h, kind):
        return 66

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.reasons

    def nvmlDeviceGetFieldValues(self, h, ids):
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=51)) for _ in ids]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-local-{h}".encode()

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"


def test_nvml_read_in_base_units():
    nv = FakeNvml()
    nv.reasons = SW_POWER_CAP | GPU_IDLE
    s = read_gpu(nv, 1, t_s=2.0, host="here")
    assert (s.source, s.endpoint, s.gpu, s.uuid, s.model_name) == ("nvml", "local", "1", "GPU-local-1", "NVIDIA H200")
    assert s.util_frac == 0.93 and s.sm_clock_hz == 1755e6 and s.mem_clock_hz == 2619e6 and s.power_w == 612.0
    assert s.memory_used_bytes == 70 * 2**30 and s.memory_total_bytes == 80 * 2**30
    assert s.temperature_c == 66 and s.memory_temperature_c == 51 and s.throttle_reasons == SW_POWER_CAP | GPU_IDLE
    assert throttle_names(s.throttle_reasons) == ["sw_power_cap"]  # idle is not throttling


def test_nvml_unsupported_calls_leave_fields_empty_and_a_dead_gpu_is_an_error_row():
    s = read_gpu(FakeNvml(unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo"}), 0, t_s=0.0, host="h")
    assert s.util_frac is None and s.memory_used_bytes is None and s.power_w == 612.0 and s.error is None
    everything = {n for n in dir(FakeNvml) if n.startswith("nvmlDeviceGet") and n != "nvmlDeviceGetHandleByIndex"}
    dead = read_gpu(FakeNvml(unsupported=everything), 0, t_s=0.0, host="h")
    assert dead.error == "every NVML call failed for this GPU"
