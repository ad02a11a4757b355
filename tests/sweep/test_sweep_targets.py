"""End-to-end sweeps: the embedded target's settings (runs in CI) and llama.cpp's chunk threshold (when llama-server is present)."""

import pytest

from harness.errors import HarnessError
from harness.store import Run
from harness.sweep.run import SweepOptions, prepare, run_sweep

EMBEDDED = "embedded,scenario=workloads/scenarios/ch9-hetero-pd.toml,startup_s=0,time_scale=0.1"


def test_embedded_sweep_scores_and_stores(tmp_path):
    # 4096-token prompts: an A100 prefills them in ≈0.43 s, an H20 in ≈0.90 s (§9.2.3 roofline at 50 %), so the
    # colocated mode, whose H20s prefill too, must show the higher TTFT p95 than PD, where only A100s do
    o = SweepOptions(target=EMBEDDED, grid=("mode=pd,colocated",), duration_s=10.0, rate_per_s=2.0, input_tokens=4096,
                     output_tokens=8, sla_s=0.7, lam=50.0, slo_ttft_s=0.7, results_dir=str(tmp_path))
    res = run_sweep(o)
    assert res.time_scale == 0.1 and len(res.points) == 2
    pts = {p["settings_json"]: p for p in res.points}
    pd, co = pts['{"mode": "pd"}'], pts['{"mode": "colocated"}']
    assert pd["status"] == co["status"] == "ok"
    # judged on the target's own schedule (simulated seconds from its emit log), not on the client's wall clock
    # divided by time_scale, which a busy machine inflates by its delays x 10 (seen: PD p95 0.68 s by the client,
    # 0.42 s as scheduled). Model margin: an H20 prefill of 4096 tokens (0.84 s) exceeds PD's A100 prefill plus
    # the KV transfer (0.40 + 0.02 s) by about 0.4 s
    assert 0.3 < pd["target_ttft_p95_s"] < co["target_ttft_p95_s"] - 0.2
    assert pd["ttft_p95_s"] >= 0.99 * pd["target_ttft_p95_s"]  # the client cannot see a token before it was scheduled
    for p in (pd, co):  # the reward is the stored throughput and latency put through the formula
        assert p["reward"] == pytest.approx(p["output_tokens_per_s"] - 50.0 * max(0.0, p["ttft_p95_s"] - 0.7))
        assert p["requests_ok"] >= 15 and p["output_tokens_per_s"] > 0 and Run(p["load_run_dir"]).manifest.kind == "load"
    assert res.best["index"] in (0, 1) and res.pareto
    run = Run(res.run_dir)
    assert run.manifest.kind == "sweep" and run.manifest.extra["reward"]["lambda"] == 50.0
    table = run.table("sweep_points")
    assert set(table["label"]) == {"mode=pd", "mode=colocated"} and table["best"].sum() == 1
    assert run.json("sweep.json")["best"]["label"] == res.best["label"]


def test_invalid_scenario_point_is_skipped_with_the_validator_message(tmp_path):
    o = SweepOptions(target=EMBEDDED, grid=("scenario.workload.decode_batch=0,8",), results_dir=str(tmp_path))
    _, pts, ts = prepare(o, tmp_path)
    assert ts == 0.1 and pts[0].spec is None and "decode_batch" in pts[0].skip_reason and pts[1].spec is not None
    with pytest.raises(HarnessError, match="every setting is invalid"):
        prepare(SweepOptions(target=EMBEDDED, grid=("scenario.workload.decode_batch=0,-1",)), tmp_path)


def test_grid_keys_checked_before_running(tmp_path):
    with pytest.raises(HarnessError, match="no setting 'batch'"):
        prepare(SweepOptions(target=EMBEDDED, grid=("batch=1,2",)), tmp_path)
    with pytest.raises(HarnessError, match="fixed for the whole sweep"):
        prepare(SweepOptions(target=EMBEDDED, grid=("time_scale=0.1,0.2",)), tmp_path)
    with pytest.raises(HarnessError, match="URL is a server already running"):
        prepare(SweepOptions(target="http://127.0.0.1:9", grid=("a.b=1,2",)), tmp_path)


def _llama_missing():
    from harness.engines.llama_cpp import binary_available

    return binary_available()


@pytest.mark.slow
def test_llama_cpp_chunk_threshold_sweep(tmp_path):
    why = _llama_missing()
    if why:
        pytest.skip(f"llama-server is not here: {why}")
    # llama.cpp's -b/-ub is the prompt chunk per step: a 128-token prompt in chunks of 32 takes 4 steps, in 512 one.
    # The test checks the sweep's machinery on a real engine, not its speed, so nothing in it is a speed limit: the
    # request timeout only guards against a hang. Sized from the work: a point is 2 requests of 128 prompt tokens,
    # about 0.4 s of prefill at the 648 prompt tokens/s llama.cpp measured on two idle cores (docs/loop-cpu.md), so
    # 600 s allows a host 1000x slower. The 60-s timeout on 4 prompts of 512 tokens failed on a busy host (every
    # request timed out; one 512-token TTFT took 29.7 s against 0.8 s idle).
    o = SweepOptions(target="llama-cpp-gemma3-270m", grid=("llama_cpp.batch_size+llama_cpp.ubatch_size=32,512",),
                     duration_s=8.0, rate_per_s=0.25, input_tokens=128, output_tokens=8, latency="ttft", sla_s=5.0,
                     request_timeout_s=600.0, results_dir=str(tmp_path))
    res = run_sweep(o)
    ok = [p for p in res.points if p["status"] == "ok"]
    assert len(ok) == 2 and all(p["ttft_p95_s"] > 0 and p["itl_p95_s"] > 0 for p in ok)
    assert all(p["time_to_ready_s"] and p["time_to_ready_s"] > 0 for p in ok)
    for p in ok:  # what the engine itself reports: it served every request of the point, with the prompt's tokens
        req = Run(p["load_run_dir"]).table("requests")
        assert (req["error_class"] == "ok").all() and (req["engine_prompt_n"] > 0).all()
        assert (req["engine_predicted_n"] == 8).all()
