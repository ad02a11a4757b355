"""The loop for GPU engines on a CPU: a vLLM / SGLang twin predicted, then measured against the embedded target serving
that twin (a simulated "engine" in real time) and against a stand-in engine launched from a vLLM config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.loop.gpu import GpuLoopOptions, StoredPoint, compare_stored, gpu_twin, run_gpu_loop
from harness.report.loop import render_text
from harness.store import Run
from harness.target.twin import save_twin

FAKE = Path(__file__).resolve().parents[1] / "engines" / "fake_llama_server.py"


def vllm_config(tmp_path: Path, command: list[str] | None = None, engine: str = "vllm") -> Path:
    p = tmp_path / f"{engine}.toml"
    section = ("[vllm]\nmax_num_seqs = 4\nmax_num_batched_tokens = 512\nenable_prefix_caching = true\n" if engine == "vllm"
               else "[sglang]\nmax_running_requests = 4\nchunked_prefill_size = 512\n")
    cmd = f"command = {command!r}\n".replace("'", '"') if command else ""
    p.write_text(f'''schema_version = 1
name = "{engine}-test"
engine = "{engine}"
[model]
hf_id = "Qwen/Qwen3-8B"
served_name = "qwen3-8b"
[server]
host = "127.0.0.1"
port = 0
{section}{cmd}[startup]
timeout_s = 30
stop_timeout_s = 5
''')
    return p


def opts(cfg: Path, tmp_path: Path, **kw) -> GpuLoopOptions:
    base = dict(config=str(cfg), gpu="h100-sxm", mixes=((256, 16),), rate_fractions=(0.3, 1.2), point_duration_s=3.0,
                results_dir=str(tmp_path / "results"))
    return GpuLoopOptions(**{**base, **kw})


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_gpu_loop_against_the_simulated_twin(tmp_path, engine):
    from harness.target.process import start_target

    cfg = vllm_config(tmp_path, engine=engine)
    o = opts(cfg, tmp_path)
    _, twin = gpu_twin(o)
    assert "UNCALIBRATED" in twin.source  # no calibration file: the datasheet, said so
    path = save_twin(twin, tmp_path / "twin.json")
    with start_target(["--twin", str(path)], max_lifetime_s=120) as t:
        rep = run_gpu_loop(GpuLoopOptions(**{**o.__dict__, "target_url": t.url}), progress=None)
    assert rep.status == "complete" and len(rep.points) == 2 and rep.kind == "loop-gpu"
    run = Run(rep.run_dir)
    assert {"loop_prediction", "loop_served", "loop_served_comparison"} <= set(run.tables())
    for c in rep.comparisons:
        x = c.row("ttft_p50_s")
        # the HTTP twin emits at its scheduled instants or later, never earlier: measured >= predicted (less clock slack)
        assert x.measured >= 0.9 * x.predicted
    md = render_text(rep)
    assert f"Twin: {engine} scheduler" in md and "UNCALIBRATED" in md
    # the twin serving itself over HTTP: its iterations, rebuilt from the stream stamps, match the simulation's
    rows = [x for x in rep.served_steps if x.engine_n >= 10 and x.twin_n >= 10]
    assert rows and "loop_served_steps" in set(run.tables()) and "Served steps" in md
    assert all(abs(x.median_error) < 0.5 for x in rows), [(x.batch, x.engine_median_s, x.twin_median_s) for x in rows]
    # `harness report RUN` renders a loop-gpu run as it renders a CPU loop's
    from harness.report.registry import report

    assert "Served load" in (report(rep.run_dir, tmp_path / "rep")[1]).read_text()
    # the same points compared offline from their stored load runs give the same comparison (h47's device runs)
    from harness.loop.measure import read_load_run

    stored = [StoredPoint(p.point, _artifact(p, rep, o), tuple(read_load_run(r.run_dir, p.point, o.point_duration_s) for r in p.runs),
                          p.fraction) for p in rep.points]
    off = compare_stored(twin, stored, duration_s=o.point_duration_s)
    assert [c.point for c in off.comparisons] == [c.point for c in rep.comparisons]
    for a, b in zip(off.comparisons, rep.comparisons):
        assert [(x.metric, x.measured) for x in a.rows] == [(x.metric, x.measured) for x in b.rows]
        assert a.row("ttft_p50_s").predicted == pytest.approx(b.row("ttft_p50_s").predicted)


def test_gpu_loop_launches_the_engine_from_its_config(tmp_path):
    cfg = vllm_config(tmp_path, command=[sys.executable, str(FAKE)])
    rep = run_gpu_loop(opts(cfg, tmp_path, rate_fractions=(0.05,), point_duration_s=2.0, log_dir=str(tmp_path / "logs")), progress=None)
    assert rep.status == "complete" and rep.points[0].measurement.requests_ok > 0


def test_the_notes_served_steps_adds_reach_the_report(tmp_path, monkeypatch):
    """served_steps adds notes (host stability, empty-text tokens); they were once lost, the notes taken before it ran."""
    import harness.loop.summary as summary

    def steps(state, say=lambda m: None):
        state.notes.append("host stability, m: a note from served_steps")
        return []

    monkeypatch.setattr(summary, "served_steps", steps)
    cfg = vllm_config(tmp_path, command=[sys.executable, str(FAKE)])
    rep = run_gpu_loop(opts(cfg, tmp_path, rate_fractions=(0.05,), point_duration_s=2.0, log_dir=str(tmp_path / "logs")), progress=None)
    assert "host stability, m: a note from served_steps" in rep.notes


def test_unreachable_target_keeps_the_partial_run(tmp_path):
    cfg = vllm_config(tmp_path)
    with pytest.raises(HarnessError, match="unreachable") as exc:
        run_gpu_loop(opts(cfg, tmp_path, target_url="http://127.0.0.1:9"), progress=None)
    assert "partial loop run is kept" in str(exc.value)
    run_dir = str(exc.value).rsplit("kept at ", 1)[1].split(" (status")[0]
    assert Run(run_dir).json("loop_report.json")["status"] == "failed"
    assert "loop_prediction" in Run(run_dir).tables()  # the prediction made before the failure is kept


def test_gpu_loop_refuses_other_engines(tmp_path):
    with pytest.raises(HarnessError, match="vLLM or SGLang"):
        gpu_twin(GpuLoopOptions(config="llama-cpp-gemma3-270m", gpu="h100-sxm"))
    with pytest.raises(HarnessError, match="--point-duration-s"):
        GpuLoopOptions(config="x", gpu="h100-sxm", point_duration_s=0.1)
    with pytest.raises(HarnessError, match="--repeats"):
        GpuLoopOptions(config="x", gpu="h100-sxm", repeats=0)
    with pytest.raises(HarnessError, match="no stored points"):
        compare_stored(gpu_twin(GpuLoopOptions(config=str(vllm_config(tmp_path)), gpu="h100-sxm"))[1], [], duration_s=3.0)


def _artifact(p, rep, o):
    """The workload a point sent, as the loop planned it (the same seed and rate: harness.loop.predict.seeded_workload)."""
    from harness.loop.predict import seeded_workload

    return seeded_workload((int(p.point.input_tokens), int(p.point.output_tokens)), p.point.rate_per_s, o.point_duration_s,
                           rep.settings.seed, p.point.index)
