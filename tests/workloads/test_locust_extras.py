"""Plain `locust -f workloads/locustfile.py` with bench-pd's GPU telemetry, engine profile window and early stop
(workloads.extras_options): against the embedded target on 127.0.0.1, a fake DCGM exporter and an unreachable one,
each run bounded in time. Bad inputs are refused before anything is sent, with the flag named."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "telemetry"))
from fake_dcgm import FakeExporter, closed_port_url  # noqa: E402

from harness.errors import HarnessError  # noqa: E402
from harness.store import Run  # noqa: E402
from harness.target.process import start_target  # noqa: E402
from workloads.locust_plugin import extras_options  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = str(ROOT / "workloads" / "locustfile.py")
SCEN = str(ROOT / "workloads/scenarios/ch9-hetero-pd.toml")


def _locust(*args, timeout_s=150):
    p = subprocess.run([sys.executable, "-m", "locust", "-f", LOCUSTFILE, *args], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
    return p.returncode, p.stdout


def _one_run(results: Path) -> Run:
    (m,) = list(results.glob("*/*/manifest.json"))
    return Run(m.parent)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    t = start_target(["--profile", "fixed", "--ttft-s", "0.02", "--itl-s", "0.005", "--profile-dir",
                      str(tmp_path_factory.mktemp("default-prof"))], max_lifetime_s=300)
    yield t
    t.stop()


def _opts(**kw):
    base = {"gpu_metrics_url": [], "gpu_nvml": "auto", "gpu_metrics_interval_s": 1.0, "profile_window": None,
            "profile_dir": None, "early_stop": False, "request_rate": 2.0}
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("kw,msg", [({"gpu_metrics_url": ["ftp://x"]}, r"--gpu-metrics-url \(all\) 'ftp://x' is not an http"),
                                    ({"gpu_nvml": "maybe"}, "--gpu-nvml must be one of auto, on, off"),
                                    ({"gpu_metrics_interval_s": "0"}, r"--gpu-metrics-interval-s must be in \[0.05, 60\]"),
                                    ({"profile_window": "3"}, "START:END"),
                                    ({"profile_dir": "/tmp/p"}, "--profile-dir qualifies --profile-window"),
                                    ({"early_stop": True, "request_rate": None},
                                     "--early-stop judges an open-loop run .* a run without --request-rate")])
def test_bad_options_are_refused_by_their_flag(kw, msg):
    with pytest.raises(HarnessError, match=msg):
        extras_options(_opts(**kw), 0.0)


def test_options_as_given():
    x = extras_options(_opts(gpu_metrics_url=["decode=http://10.0.0.7:9400/metrics"], profile_window="1:3", early_stop=True,
                             gpu_metrics_interval_s="0.5"), 2.0)
    assert x.gpu_metrics == [{"role": "decode", "url": "http://10.0.0.7:9400/metrics"}] and x.gpu_interval_s == 0.5
    assert x.profile_window == (1.0, 3.0) and x.warmup_s == 2.0 and x.early_stop


def test_a_profile_window_outside_the_run_is_refused_before_it(tmp_path, target):
    rc, out = _locust("--host", target.url, "--headless", "-u", "2", "-r", "2", "-t", "30s", "--request-rate", "2",
                      "--duration-s", "3", "--warmup-s", "0", "--input-tokens", "8", "--output-tokens", "2",
                      "--profile-window", "1:5", "--results", str(tmp_path), "--only-summary", timeout_s=90)
    assert rc == 1 and "error: --profile-window 1:5 ends 5 s into the measurement window, but the window is 3 s long" in out, out
    assert "Traceback" not in out and not list(tmp_path.glob("*/*/manifest.json"))


@pytest.mark.slow
def test_gpu_telemetry_and_a_profile_window_in_a_plain_locust_run(tmp_path, target):
    bad = closed_port_url()
    prof = tmp_path / "prof"
    with FakeExporter(util=70, throttle=True) as ex:
        rc, out = _locust("--host", target.url, "--headless", "-u", "6", "-r", "6", "-t", "60s", "--request-rate", "4",
                          "--duration-s", "4", "--schedule", "constant", "--warmup-s", "0", "--input-tokens", "16",
                          "--output-tokens", "6", "--gpu-metrics-url", f"decode={ex.url}", "--gpu-metrics-url", bad,
                          "--gpu-metrics-interval-s", "0.5", "--profile-window", "0.5:2.5", "--profile-dir", str(prof),
                          "--results", str(tmp_path / "results"), "--only-summary")
    assert rc == 0, out  # the unreachable exporter is a warning and recorded failed reads, not a failed run
    assert f"warning: --gpu-metrics-url {bad} (all) gives no GPU sample" in out and "Connection refused" in out
    run = _one_run(tmp_path / "results")
    df = run.table("gpu_metrics")
    ok, failed = df[df["error"].isna()], df[df["error"].notna()]
    assert set(ok["role"]) == {"decode"} and set(ok["gpu"]) == {"0", "1"} and ok["util_frac"].sub(0.70).abs().max() < 1e-9
    assert set(failed["endpoint"]) == {bad} and len(failed) >= 1
    assert any(f"GPU telemetry from {bad}" in n for n in run.manifest.notes)
    # the console says it as bench-pd does: the steady phase per GPU, the failing endpoint, the profile span
    assert "harness: GPU node-7/1 (dcgm, decode) steady: util 70 %" in out and "sw_thermal" in out, out
    assert f"harness: GPU telemetry from {bad}:" in out
    p = json.loads((run.path / "profile.json").read_text())
    start, stop = p["calls"]
    assert start["path"] == "/start_profile" and start["status"] == 200 and start["sent_s"] >= 0.5 - 0.01
    assert stop["path"] == "/stop_profile" and stop["status"] == 200 and stop["sent_s"] >= max(2.5 - 0.01, start["answered_s"])
    assert str(prof) in p["trace"] and any(prof.iterdir())
    assert "harness: profile: window 0.5–2.5 s since t0" in out


@pytest.mark.slow
def test_an_over_saturated_plain_run_is_cut_short_and_marked(tmp_path):
    # the chapter's deployment at full time scale: 8192-token prompts at 9 req/s against the P pool's ~4.7 req/s
    # (§9.2.3: d_P 0.856 s on A100), the queue grows; the rule fires 20-30 s in (workloads/oversaturation.py)
    t = start_target(["--scenario", SCEN, "--time-scale", "1", "--startup-s", "0"], max_lifetime_s=240)
    try:
        rc, out = _locust("--host", t.url, "--headless", "-u", "400", "-r", "400", "-t", "120s", "--request-rate", "9",
                          "--duration-s", "60", "--schedule", "constant", "--input-tokens", "8192", "--output-tokens", "4",
                          "--early-stop", "--results", str(tmp_path), "--only-summary", timeout_s=200)
    finally:
        t.stop()
    assert rc == 1, out  # the rest of its schedule was not sent: the run says so
    run = _one_run(tmp_path)
    cut = run.manifest.extra["early_stop"]
    assert cut["oversaturated"] and 20.0 <= cut["t_s"] < 60.0, cut
    df = run.table("requests")
    assert (df["error_class"] == "not_sent").sum() > 9 * (60 - cut["t_s"]) / 2 and df["sent_ns"].max() / 1e9 < cut["t_s"] + 5
    assert any("stopped early" in n and "over-saturated" in n for n in run.manifest.notes)
    assert f"harness: stopped early at {cut['t_s']:.1f} s: over-saturated" in out
