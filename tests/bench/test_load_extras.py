"""bench-pd's GPU telemetry, profile and early-stop options: parsed, validated, turned into the load process's fields."""

import pytest

from harness.bench.load_extras import load_config_fields, parse_gpu_metrics_url
from harness.bench.pd import BenchPdOptions
from harness.errors import HarnessError
from workloads.artifact import WorkloadArtifact
from workloads.gpu_telemetry import target_is_local


def test_gpu_metrics_urls_with_and_without_a_role():
    assert parse_gpu_metrics_url("http://10.0.0.6:9400/metrics") == {"role": "all", "url": "http://10.0.0.6:9400/metrics"}
    assert parse_gpu_metrics_url("decode=http://10.0.0.7:9400/metrics") == {"role": "decode", "url": "http://10.0.0.7:9400/metrics"}
    with pytest.raises(HarnessError, match=r"--gpu-metrics-url \(prefill\) 'ftp://h' is not an http"):
        parse_gpu_metrics_url("prefill=ftp://h")
    with pytest.raises(HarnessError, match=r"--gpu-metrics-url \(all\) 'both=http://h' is not an http"):
        parse_gpu_metrics_url("both=http://h")


@pytest.mark.parametrize("kw,msg", [({"gpu_nvml": "maybe"}, "--gpu-nvml must be one of auto, on, off"),
                                    ({"gpu_interval_s": 0.0}, "--gpu-metrics-interval-s must be in"),
                                    ({"profile_dir": "/tmp/p"}, "--profile-dir qualifies --profile-window"),
                                    ({"early_stop": True, "concurrency": 4}, "--early-stop judges an open-loop run"),
                                    ({"gpu_metrics": [{"role": "all", "url": "nope"}]}, "--gpu-metrics-url")])
def test_bad_options_are_refused(kw, msg):
    with pytest.raises(HarnessError, match=msg):
        BenchPdOptions(**kw)


def _art(span_s=10.0, rate=2.0):
    rows = [{"request_index": 0, "session_id": 0, "turn": 0, "intended_s": 0.0, "pause_before_s": 0.0, "api": "chat", "prompt": "a",
             "prompt_tokens_target": 1, "max_tokens": 1, "prefix_group": -1, "prefix_tokens": 0}]
    return WorkloadArtifact("t", rows, {"schedule": {"kind": "constant", "span_s": span_s, "mean_rate_per_s": rate}})


def test_fields_for_the_load_process():
    o = BenchPdOptions(warmup_s=2.0, duration_s=10.0, profile_window=(1.0, 3.0), early_stop=True, gpu_nvml="off")
    f = load_config_fields(o, _art(), target_url=None)
    assert f["profile"] == {"window_s": [3.0, 5.0], "window_in_measurement_s": [1.0, 3.0], "output_dir": None}
    assert f["early_stop"] == {"rate_per_s": 2.0, "rule": {}} and f["gpu_local"] is False and f["gpu_metrics"] == []
    on = load_config_fields(BenchPdOptions(gpu_nvml="on"), _art(), target_url="http://10.0.0.5:8000")
    assert on["gpu_local"] is True and "profile" not in on and "early_stop" not in on
    # auto: a local target is sampled only where NVML sees a GPU (on a CPU-only host no sampler is started)
    from harness.telemetry.nvml import status

    assert load_config_fields(BenchPdOptions(), _art(), target_url=None)["gpu_local"] is status()[0]
    assert load_config_fields(BenchPdOptions(), _art(), target_url="http://10.0.0.5:8000")["gpu_local"] is False
    with pytest.raises(HarnessError, match="ends 9 s into the measurement window, but the window is 8 s long"):
        load_config_fields(BenchPdOptions(warmup_s=2.0, profile_window=(1.0, 9.0)), _art(), target_url=None)


def test_which_targets_are_local():
    assert target_is_local(None) and target_is_local("http://127.0.0.1:8000") and target_is_local("http://localhost:1")
    assert not target_is_local("http://10.0.0.5:8000")
