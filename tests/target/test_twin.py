"""The digital twin: the discrete-event simulation runs the same schedulers as the HTTP target, reproduces the
chapter's numbers in chapter mode, round-trips its spec, and predicts a ten-minute sweep fast (a benchmark)."""

import json
import urllib.request

import pytest

from harness.errors import HarnessError
from harness.specs.models import ModelSpec
from harness.specs.scenario import load_scenario
from harness.target.chapter import ChapterScheduler
from harness.target.deployment import deployment_from_scenario
from harness.target.des import ArrivingRequest, saturation_capacity, simulate
from harness.target.llama_server import LlamaServerSettings
from harness.target.step_times import RooflineStepTimes
from harness.target.twin import TwinSpec, capacity, load_twin, predict_point, requests_from_schedule, save_twin
from workloads.schedule import make_schedule

T_PREFILL_A100 = 0.8563738676512821  # chapter 9, §9.2.3: 0.856 s
T_KV = 1.125 * 2**30 / 25e9 + 5e-6  # §9.2.2, example 9.1: 48.3 ms + 5 µs

# a Gemma-3-270M-shaped model (18 layers, hidden 640, 4 heads / 1 KV head of 256, FFN 2048, 262 144 vocab)
GEMMA_LIKE = ModelSpec(name="gemma-like", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256,
                       intermediate_size=2048, vocab_size=262144, source="test", tie_word_embeddings=True)


def twin(slots=4):
    return TwinSpec("llama.cpp", LlamaServerSettings(slots=slots, ctx_size=8192, swa_checkpoints=True),
                    RooflineStepTimes(GEMMA_LIKE, 143e9, 10.6e9, 0.92, 2.0, "test constants"), "gemma-like", "test")


@pytest.fixture
def chapter_dep(scenario_path):
    return deployment_from_scenario(load_scenario(scenario_path("ch9-hetero-pd")), startup_s=0.0)


def test_chapter_mode_ttft_and_decode_steps(chapter_dep):
    r = simulate(lambda: ChapterScheduler(chapter_dep), [ArrivingRequest(0.0, 8192, 3)])
    # chapter 9, §9.2.3: TTFT = 0.856 s of prefill on an A100 + the 1.125 GiB KV transfer over 25 GB/s
    assert r.first_token_s[0] == pytest.approx(T_PREFILL_A100 + T_KV, abs=1e-9)
    svc = chapter_dep.services["h20-96gb"]
    assert r.finished_s[0] - r.first_token_s[0] == pytest.approx(svc.decode_step_s(1, 8193) + svc.decode_step_s(1, 8194), rel=1e-9)


def test_chapter_mode_capacity_matches_example_9_2(chapter_dep):
    # example 9.2: 4 A100 in P, 4 H20 in D, decode-bound at 4.55 req/s (fluid model). The simulation admits at step
    # boundaries and runs each step at its actual batch and context, which costs ~2 %; pinned within 3 %.
    rps, _ = saturation_capacity(lambda: ChapterScheduler(chapter_dep), [(8192, 1025)], n_requests=400)
    assert rps == pytest.approx(4.55, rel=0.03)
    assert rps < 4.555  # never above the fluid bound


def test_prediction_shape_and_monotonic_latency():
    spec = twin()
    cap_rps, cap_tok = capacity(spec.make_scheduler, 512, 64, slots=4)
    assert cap_tok == pytest.approx(64 * cap_rps)
    figs = []
    for f in (0.2, 0.8):
        sch = make_schedule("poisson", rate_per_s=f * cap_rps, duration_s=120, seed=3)
        figs.append(predict_point(spec.make_scheduler, requests_from_schedule(sch.intended_s, 512, 64), rate_per_s=f * cap_rps, span_s=120))
    lo, hi = figs
    assert lo.ttft_p50_s < hi.ttft_p50_s and lo.ttft_p50_s >= spec.step_times.prefill_time_s(508)
    assert lo.tpot_p50_s <= hi.tpot_p50_s
    assert lo.request_throughput_per_s < hi.request_throughput_per_s <= cap_rps * 1.05


def test_twin_spec_round_trip(tmp_path):
    p = save_twin(twin(), tmp_path / "twin.json")
    back = load_twin(p)
    assert back.settings == twin().settings and back.step_times == twin().step_times
    # the loop's correction tables come back as the tuples they were (JSON writes lists)
    from dataclasses import replace

    corrected = replace(twin(), settings=replace(twin().settings, mixed_correction_by_batch_tokens_s=((1, 128, 0.02), (3, 128, 0.05)),
                                                 prefill_correction_by_tokens_s=((32, 0.01),)))
    assert load_twin(save_twin(corrected, tmp_path / "corrected.json")).settings == corrected.settings
    d = json.loads(p.read_text())
    d["schema_version"] = 99
    p.write_text(json.dumps(d))
    with pytest.raises(HarnessError, match="newer than this harness"):
        load_twin(p)
    with pytest.raises(HarnessError, match="cannot be read"):
        load_twin(tmp_path / "missing.json")


def test_http_twin_runs_the_same_scheduler(tmp_path):
    """The HTTP twin (real time, 20x faster) and the simulation agree on a lone request's TTFT and E2E."""
    from harness.target.process import start_target

    spec = twin(slots=1)
    path = save_twin(spec, tmp_path / "twin.json")
    n_in, n_out = 300, 20
    ref = simulate(spec.make_scheduler, [ArrivingRequest(0.0, n_in, n_out)])
    scale = 0.05
    with start_target(["--twin", str(path), "--time-scale", str(scale)], max_lifetime_s=60) as t:
        body = json.dumps({"model": "m", "prompt": " ".join(["w"] * n_in), "max_tokens": n_out, "stream": False}).encode()
        req = urllib.request.Request(t.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        import time

        t0 = time.perf_counter()
        out = json.loads(urllib.request.urlopen(req, timeout=30).read())
        wall = time.perf_counter() - t0
        info = json.loads(urllib.request.urlopen(t.url + "/harness/info", timeout=10).read())
    assert out["usage"]["completion_tokens"] == n_out and info["profile"] == "twin"
    # simulated E2E × time scale, plus HTTP and a loaded machine's scheduling slack
    assert ref.finished_s[0] * scale <= wall + 0.005
    assert wall < ref.finished_s[0] * scale + 1.0


def test_ten_minute_sweep_at_four_rates(benchmark):
    """Issue 15: a 10-minute workload at 4 rates predicted in under 10 s (a benchmark; run with --benchmark-enable)."""
    spec = twin()
    cap_rps, _ = capacity(spec.make_scheduler, 512, 64, slots=4)
    work = []
    for f in (0.2, 0.5, 0.8, 1.2):
        sch = make_schedule("poisson", rate_per_s=f * cap_rps, duration_s=600, seed=0)
        work.append((f * cap_rps, requests_from_schedule(sch.intended_s, 512, 64)))

    def sweep():
        return [predict_point(spec.make_scheduler, reqs, rate_per_s=r, span_s=600) for r, reqs in work]

    figs = benchmark.pedantic(sweep, rounds=1, iterations=1)
    assert len(figs) == 4 and all(f.ttft_p50_s is not None for f in figs)
