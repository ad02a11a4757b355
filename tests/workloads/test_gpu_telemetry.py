"""GPU telemetry during a load: the sampling child writes table gpu_metrics on the run's time axis and reports failed
reads; phases from the requests; the per-phase, per-GPU summary."""

import sys
import time
from pathlib import Path
from time import perf_counter_ns

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "telemetry"))
from fake_dcgm import FakeExporter, closed_port_url  # noqa: E402
from test_gpu_telemetry_sources import FakeNvml  # noqa: E402

from harness.records import new_manifest  # noqa: E402
from harness.store import Run, RunWriter  # noqa: E402
from harness.telemetry.gpu_sample import COLUMN_DTYPES, GpuSample, samples_frame  # noqa: E402
from harness.telemetry.nvml import HW_THERMAL  # noqa: E402
from workloads.gpu_summary import summarise_gpu, summary_lines  # noqa: E402
from workloads.gpu_telemetry import GpuTelemetryConfig, GpuTelemetryProcess, Sampler  # noqa: E402
from workloads.phases import LoadPhases, load_phases  # noqa: E402


def test_sampler_reads_nvml_and_each_exporter_with_its_role():
    with FakeExporter() as ex:
        bad = closed_port_url()
        cfg = GpuTelemetryConfig(local=True, endpoints=[{"role": "prefill", "url": ex.url}, {"role": "decode", "url": bad}])
        s = Sampler(cfg, perf_counter_ns(), nv=FakeNvml(2))
        rows = s.sample_once()
    assert [(r.source, r.role, r.gpu) for r in rows if not r.error] == [("nvml", "all", "0"), ("nvml", "all", "1"),
                                                                         ("dcgm", "prefill", "0"), ("dcgm", "prefill", "1")]
    (err,) = [r for r in rows if r.error]
    assert err.role == "decode" and err.endpoint == bad
    rep = s.report()
    assert rep["samples"] == 4 and rep["errors"][bad]["count"] == 1 and rep["nvml"] == "NVML: injected NVML"
    assert all(0 <= r.t_s < 5 for r in rows)


def test_sampling_process_writes_the_table_and_reports_an_unreachable_exporter(tmp_path):
    w = RunWriter(new_manifest("load", run_id="gpu-t"), tmp_path)
    bad = closed_port_url()
    with FakeExporter(util=55) as ex:
        t0 = perf_counter_ns()
        proc = GpuTelemetryProcess(w.path, "gpu-t", t0, GpuTelemetryConfig(endpoints=[{"role": "all", "url": ex.url},
                                                                                      {"role": "decode", "url": bad}],
                                                                           interval_s=0.1))
        deadline = time.monotonic() + 60  # the child starts (a Python process; slow on a busy host), then samples every 0.1 s
        while ex.hits < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        rep = proc.close()
    elapsed_s = (perf_counter_ns() - t0) / 1e9
    df = Run(w.path).table("gpu_metrics")
    ok = df[df["error"].isna()]
    assert rep["samples"] == len(ok) > 0 and rep["parts"] >= 1 and rep["errors"][bad]["count"] >= 1
    assert set(ok["gpu"]) == {"0", "1"} and (ok["util_frac"] == 0.55).all() and set(ok["role"]) == {"all"}
    assert df["t_s"].between(0, elapsed_s).all()  # on the run's time axis (same clock, t0 given)
    assert set(df.columns) >= set(COLUMN_DTYPES) and str(df["throttle_reasons"].dtype) == "Int64"


def test_local_nvml_unavailable_says_why_and_stops():
    rep = GpuTelemetryProcess(Path("/nonexistent"), "x", perf_counter_ns(), GpuTelemetryConfig(local=True)).close()
    assert rep["samples"] == 0 and rep["parts"] == 0 and rep["nvml"].startswith("NVML unavailable")


def _requests(rows):
    return pd.DataFrame(rows, columns=["sent_ns", "e2e_s"])


def test_phases_follow_the_progress_rule():
    # 1 req/s sent from 0 to 20 s; the first 6 take 8 s (a startup backlog), the rest 0.5 s
    rows = [(int(i * 1e9), 8.0 if i < 6 else 0.5) for i in range(20)]
    ph = load_phases(_requests(rows), span_s=20.0)
    # completions catch up with sends once the slow ones land (the 6th ends at 13 s) and the window holds 90 % of sends
    assert 8.0 <= ph.startup_end_s <= 14.0 and ph.steady_end_s == 20.0 and ph.end_s == pytest.approx(19.5 + 0.0, abs=1.0)
    assert list(ph.phase_of([-1.0, 0.5, ph.startup_end_s, 19.9, 20.1, 99.0])) == ["before", "startup", "steady", "steady",
                                                                                   "after", "after"]
    never = load_phases(_requests([(int(i * 1e9), 60.0) for i in range(20)]), span_s=20.0)
    assert never.startup_end_s == 20.0 and never.bounds("steady") == (20.0, 20.0)  # no steady phase


def test_gpu_summary_per_phase_and_gpu():
    ph = LoadPhases(10.0, 30.0, 40.0)
    s = []
    for t in range(0, 40):
        hot = 15 <= t < 20
        s.append(GpuSample(t_s=float(t), source="dcgm", role="decode", endpoint="u", host="n", gpu="0",
                           util_frac=0.2 if t < 10 else 0.9, sm_clock_hz=1.98e9 - (3e8 if hot else 0), power_w=300.0 + t,
                           memory_used_bytes=1e9 * t, temperature_c=50.0 + t / 10, throttle_reasons=HW_THERMAL if hot else 0))
    s.append(GpuSample(t_s=5.0, source="dcgm", role="decode", endpoint="v", error="ConnectionRefusedError: refused"))
    out = summarise_gpu(samples_frame(s), ph)
    by = {r.phase: r for r in out.rows}
    assert set(by) == {"startup", "steady", "drain"} and by["startup"].samples == 10 and by["steady"].samples == 20
    assert by["startup"].util_mean_frac == pytest.approx(0.2) and by["steady"].util_mean_frac == pytest.approx(0.9)
    assert by["steady"].throttled_frac == pytest.approx(5 / 20) and by["steady"].throttle_reasons == ["hw_thermal"]
    assert by["steady"].sm_clock_min_hz == pytest.approx(1.68e9) and by["drain"].throttled_frac == 0.0
    assert by["drain"].power_max_w == 339.0 and by["drain"].memory_used_max_bytes == 39e9
    assert out.errors == {"v": {"count": 1, "first": "ConnectionRefusedError: refused", "first_t_s": 5.0}}
    lines = summary_lines(out)
    assert any("steady: util 90 %" in ln and "throttled 25% (hw_thermal)" in ln for ln in lines)
    assert lines[-1].startswith("GPU telemetry from v: 1 failed reads")


@pytest.mark.parametrize("entry,msg", [({"role": "both", "url": "http://h:9400/metrics"}, "role one of all, prefill, decode"),
                                       ({"role": "decode", "url": "ftp://h/metrics"}, r"--gpu-metrics-url \(decode\) 'ftp://h/metrics' is not an http"),
                                       ({"url": "http://h:9400/metrics"}, "entries must be {role, url}")])
def test_bad_gpu_metrics_entries_are_refused(entry, msg):
    from harness.errors import HarnessError
    from workloads.config import LoadConfig

    with pytest.raises(HarnessError, match=msg):
        LoadConfig(target_url="http://127.0.0.1:1", artifact_path="a", run_id="r", gpu_metrics=[entry])
