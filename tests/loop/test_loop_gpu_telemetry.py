"""GPU telemetry in the loops (harness.loop.gpu_telemetry): the served points' load runs sample a fake DCGM exporter (and
an unreachable one: a note, the loop goes on) or this host's NVML (a fake pynvml, in every process of the load); the loop
run keeps the samples as its gpu_metrics table on its time axis and a per point / repeat / phase summary, which its
report tables and plots. Without any source (this CPU host) the loop says so plainly and samples nothing."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "telemetry"))
sys.path.insert(0, str(HERE))
from fake_dcgm import FakeExporter, closed_port_url  # noqa: E402
from test_gpu import opts as gpu_opts  # noqa: E402
from test_gpu import vllm_config  # noqa: E402
from test_gpu_telemetry_sources import FakeNvml  # noqa: E402

from harness.errors import HarnessError  # noqa: E402
from harness.loop.gpu import run_gpu_loop  # noqa: E402
from harness.loop.gpu_telemetry import LoopGpuTelemetry  # noqa: E402
from harness.loop.options import GpuTelemetryOptions, LoopPlan  # noqa: E402
from harness.loop.output import LoopOutput  # noqa: E402
from harness.loop.run import run_loop  # noqa: E402
from harness.loop.state import LoopState  # noqa: E402
from harness.loop_records.stages import CpuConstants  # noqa: E402
from harness.report.loop import LOOP_GPU_FILE, render, render_text  # noqa: E402
from harness.store import Run  # noqa: E402
from harness.target.process import start_target  # noqa: E402


def _state() -> LoopState:
    return LoopState(LoopPlan(None, (), 0, True, False, True, ((8, 2),), (0.5,), 2.0, 0, 1, 1, False))  # type: ignore[arg-type]


def test_options_name_the_flag():
    with pytest.raises(HarnessError, match="--gpu-nvml must be one of auto, on, off, got 'maybe'"):
        GpuTelemetryOptions(nvml="maybe")
    with pytest.raises(HarnessError, match=r"--gpu-metrics-interval-s must be in \[0.05, 60\] seconds"):
        GpuTelemetryOptions.from_flags([], interval_s=0.0)
    with pytest.raises(HarnessError, match=r"--gpu-metrics-url \(decode\) 'ftp://x' is not an http"):
        GpuTelemetryOptions.from_flags(["decode=ftp://x"])
    o = GpuTelemetryOptions.from_flags(["http://10.0.0.7:9400/metrics", "prefill=http://10.0.0.6:9400/metrics"], "off", 0.5)
    assert o.endpoints == ({"role": "all", "url": "http://10.0.0.7:9400/metrics"},
                           {"role": "prefill", "url": "http://10.0.0.6:9400/metrics"}) and o.nvml == "off"


def test_no_source_is_said_plainly_and_nothing_is_sampled(monkeypatch):
    monkeypatch.setattr("harness.loop.gpu_telemetry.nvml_status", lambda: (False, "NVML unavailable: NVMLError_LibraryNotFound"))
    g, st = LoopGpuTelemetry(GpuTelemetryOptions(), LoopOutput("loop-cpu", None, engine={}, command_line=(), extra={})), _state()
    g.start("http://127.0.0.1:8080", st)
    assert g.load_fields() == {"gpu_local": False, "gpu_metrics": [], "gpu_interval_s": 1.0}
    (note,) = st.notes
    assert note.startswith("GPU telemetry: none sampled: no GPU on this host that NVML can see (NVML unavailable: "
                           "NVMLError_LibraryNotFound), and no --gpu-metrics-url was given")
    assert not note.startswith("error")  # a note in the report, not a failure
    assert g.document()["sources"] == [] and g.document()["why_none"] in note


def test_nvml_auto_samples_a_local_engine_only(monkeypatch):
    monkeypatch.setattr("harness.loop.gpu_telemetry.nvml_status", lambda: (True, "NVML sampling on: 2 GPU(s)"))
    out = LoopOutput("loop-gpu", None, engine={}, command_line=(), extra={})
    here = LoopGpuTelemetry(GpuTelemetryOptions(), out)
    here.start("http://127.0.0.1:8000", _state())
    assert here.load_fields()["gpu_local"] is True and here.sources == ["nvml (local)"]
    away, st = LoopGpuTelemetry(GpuTelemetryOptions(), out), _state()
    away.start("http://10.0.0.5:8000", st)
    assert away.load_fields()["gpu_local"] is False and "runs on another host" in st.notes[0]
    off = LoopGpuTelemetry(GpuTelemetryOptions(nvml="off"), out)
    off.start("http://127.0.0.1:8000", _state())
    assert off.load_fields()["gpu_local"] is False


@pytest.mark.slow
def test_gpu_loop_samples_an_exporter_per_point_and_an_unreachable_one_keeps_the_loop(tmp_path):
    bad = closed_port_url()
    cfg = vllm_config(tmp_path)
    with FakeExporter(util=81, throttle=True) as ex, \
            start_target(["--profile", "fixed", "--ttft-s", "0.02", "--itl-s", "0.005"], max_lifetime_s=180) as t:
        o = gpu_opts(cfg, tmp_path, target_url=t.url, rate_fractions=(0.05,), point_duration_s=3.0, repeats=2,
                     gpu_telemetry=GpuTelemetryOptions.from_flags([f"decode={ex.url}", bad], interval_s=0.5))
        rep = run_gpu_loop(o, progress=None)
    assert rep.status == "complete"
    assert any(n.startswith(f"GPU telemetry: --gpu-metrics-url {bad} (all) gives no GPU sample") for n in rep.notes)
    run = Run(rep.run_dir)
    df = run.table("gpu_metrics")
    ok, failed = df[df["error"].isna()], df[df["error"].notna()]
    assert set(ok["role"]) == {"decode"} and set(ok["gpu"]) == {"0", "1"} and ok["util_frac"].sub(0.81).abs().max() < 1e-9
    assert set(failed["endpoint"]) == {bad}
    assert set(df["point"]) == {0} and set(df["repeat"]) == {0, 1} and "steady" in set(ok["phase"])
    # on the loop's time axis: each load run's samples shifted by that run's start, the repeat after the first
    shift = (df["t_s"] - df["point_t_s"]).groupby(df["repeat"])
    assert (shift.max() - shift.min()).max() < 1e-6 and 0 < shift.min()[0] < shift.min()[1]
    doc = run.json(LOOP_GPU_FILE)
    assert doc["sources"] == [f"dcgm decode {ex.url}", f"dcgm all {bad}"] and len(doc["runs"]) == 2
    steady = [r for x in doc["runs"] for r in x["gpu"]["rows"] if r["phase"] == "steady" and r["gpu"] == "1"]
    assert len(steady) == 2 and all(r["throttle_reasons"] == ["sw_thermal"] for r in steady)
    md = render_text(rep)
    assert "## GPU telemetry during the served points" in md and f"{bad}: " in md and "sw_thermal" in md
    assert "| 256/16 |" in md and "| steady |" in md
    paths = render(rep.run_dir, tmp_path / "rep")
    html = [p for p in paths if p.name == "index.html"][0].read_text()
    assert 'alt="GPU telemetry during the served points" src="data:image/png;base64,' in html
    assert (tmp_path / "rep" / "figures" / "gpu-telemetry.png").stat().st_size > 10_000


def _fake_pynvml(tmp_path: Path) -> tuple[Path, types.ModuleType]:
    """A `pynvml` module backed by FakeNvml(2): put first on PYTHONPATH it is what every process of the load imports."""
    d = tmp_path / "fake_pynvml"
    d.mkdir()
    (d / "pynvml.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(HERE.parent / 'telemetry')!r})\n"
        "from test_gpu_telemetry_sources import FakeNvml\n"
        "_nv = FakeNvml(2)\n"
        "def nvmlInit():\n    return None\n"
        "def __getattr__(name):\n    return getattr(_nv, name)\n")
    mod = types.ModuleType("pynvml")
    nv = FakeNvml(2)
    mod.nvmlInit = lambda: None  # type: ignore[attr-defined]
    mod.__getattr__ = lambda name: getattr(nv, name)  # type: ignore[attr-defined]
    return d, mod


@pytest.mark.slow
def test_cpu_loop_samples_local_nvml_when_it_sees_a_gpu(tmp_path, monkeypatch):
    pytest.importorskip("gguf", reason="the gguf package writes the test models")
    from test_run import config, fake_binary, quick_opts  # noqa: PLC0415 - needs gguf (skipped without it)
    from random_gguf import write_random_gguf  # noqa: PLC0415 - on the path test_run sets

    d, mod = _fake_pynvml(tmp_path)
    monkeypatch.setitem(sys.modules, "pynvml", mod)  # this process's NVML check
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(d), os.environ.get("PYTHONPATH", "")]))  # the load's processes
    c = CpuConstants(1, 2e9, {"qkv": {"m": 1, "n": 1, "k": 1, "flops": 1.0, "median_s": 1.0, "flops_per_s": 1.0, "cv": 0.0}},
                     1e9, 1e6, None, None, None, "test", "known constants")
    monkeypatch.setattr("harness.loop.run.calibrate_cpu", lambda gm, **kw: c)
    model = write_random_gguf(tmp_path / "rand.gguf")
    rep = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path, rate_fractions=(0.3,), stages=False,
                              point_duration_s=3.0, gpu_telemetry=GpuTelemetryOptions(interval_s=0.5)), progress=None)
    assert rep.status == "complete"
    df = Run(rep.run_dir).table("gpu_metrics")
    assert set(df["source"]) == {"nvml"} and df["error"].isna().all() and set(df["gpu"]) == {"0", "1"}
    assert (df["util_frac"] == 0.93).all() and (df["model_name"] == "NVIDIA H200").all() and set(df["point"]) == {0}
    doc = Run(rep.run_dir).json(LOOP_GPU_FILE)
    assert doc["sources"] == ["nvml (local)"] and doc["nvml"] == "NVML sampling on: 2 GPU(s)"
    assert "## GPU telemetry during the served points" in render_text(rep) and "nvml, all" in render_text(rep)


def test_a_load_run_whose_telemetry_cannot_be_read_is_noted_not_fatal(tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    from harness.served import ServedPoint

    monkeypatch.setattr("harness.loop.gpu_telemetry.nvml_status", lambda: (True, "NVML sampling on: 1 GPU(s)"))
    g = LoopGpuTelemetry(GpuTelemetryOptions(), LoopOutput("loop-cpu", None, engine={}, command_line=(), extra={}))
    g.start("http://127.0.0.1:8080", _state())
    p = NS(point=ServedPoint(8, 2, rate_per_s=1.0, workload="8/2"), burst=False)
    g.collect(p, NS(run=NS(repeat=0, run_dir=str(tmp_path / "gone"))))
    (run,) = g.document()["runs"]
    assert run["gpu"] is None and run["error"].startswith("its GPU telemetry could not be read (")
    assert run["mix"] == "8/2" and run["load"] == "1 req/s"
