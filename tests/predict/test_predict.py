"""harness predict: chapter mode reproduces the chapter, the twin predicts a GPU deployment, bad inputs are refused
with the field and the fix. No aiconfigurator needed: these run on the datasheet constants (--calibration none)."""

import json

import pytest

from harness.cli import main as cli_main
from harness.errors import HarnessError
from harness.model.parallel import Parallel
from harness.predict.deployment import Deployment, Workers, Workload
from harness.predict.predict import predict, predict_chapter


def test_chapter_mode_first_token_is_prefill_plus_the_kv_handoff():
    # §9.2.3: 8192 tokens prefill in 0.856 s on an A100 at 50 % of peak; example 9.1: 1.125 GiB over 25 GB/s in 48.3 ms
    p = predict_chapter("ch9-hetero-pd", Workload(8192, 1025, rate_per_s=0.02, requests=3))
    assert p.ttft_s.mean == pytest.approx(0.856 + 0.0483, abs=0.002)
    assert p.mode == "chapter" and "Chapter 9" in p.calibration


def test_chapter_mode_pd_serves_3_5_per_s_and_replicas_do_not():
    # example 9.2 / 9.8: 3.5 req/s arrive; PD (4.55 req/s) keeps the queue bounded, colocated replicas (3.02) do not
    def run(n, mode=None):
        return predict_chapter("ch9-hetero-pd", Workload(8192, 1025, rate_per_s=3.5, requests=n), mode=mode).ttft_s

    pd_short, pd_long = run(150), run(600)
    co_short, co_long = run(150, "colocated"), run(600, "colocated")
    assert pd_long.p50 == pytest.approx(0.904, abs=0.1) and pd_long.max < 2 * pd_short.max  # bounded queue
    assert co_long.max > 3 * co_short.max  # the replicas' queue grows with the length of the run


def _dep(**kw):
    base = dict(engine="vllm", gpu="h200-sxm", model="llama-3.1-70b", precision="fp8", workers=Workers(1, Parallel(tp=8)))
    return Deployment(**{**base, **kw})


def test_an_aggregated_point_is_predicted_and_says_what_it_used():
    p = predict(_dep(), Workload(1024, 256, concurrency=8, requests=16), calibration="none")
    assert p.ttft_s.count == 16 and p.tpot_s.mean > 0 and p.request_throughput_per_gpu_s > 0
    assert p.calibration_kind == "uncalibrated" and "50 %" in p.calibration
    assert p.kv is not None and not p.kv.capped and p.gpus == 8
    assert any("vLLM defaults" in n for n in p.notes)


def test_kv_memory_caps_the_batch_and_says_so():
    # 70B FP8 on one H200: ~50 GB of KV room, 9216-token sequences of 320 KiB a token: about 16 fit, 64 clients
    d = _dep(engine="trtllm", workers=Workers(1, Parallel(tp=1)))
    p = predict(d, Workload(1024, 8192, concurrency=64, requests=64, warmup_requests=0), calibration="none")
    assert p.kv.capped and p.kv.batch_limit < 64 and p.kv.peak_running <= p.kv.batch_limit + 1
    assert any("KV memory caps the batch" in n for n in p.notes)


def test_disaggregated_point():
    d = Deployment("sglang", "h200-sxm", "llama-3.1-70b", "fp8", mode="disagg",
                   prefill=Workers(1, Parallel(tp=4), 4), decode=Workers(1, Parallel(tp=4), 32))
    p = predict(d, Workload(2048, 128, concurrency=16, requests=32), calibration="none")
    assert p.gpus == 8 and p.ttft_s.mean > 0 and "KV hand-off over cx7-400g" in " ".join(p.notes)


@pytest.mark.parametrize("kw, match", [
    (dict(gpu="h100"), "No GPU spec 'h100'. Known: .*h100-sxm"),
    (dict(precision="nvfp4"), "precision = 'nvfp4' is not supported: NVFP4 GEMMs need FP4 tensor cores"),
    (dict(gpu="a100-80gb-sxm"), "precision = 'fp8': a100-80gb-sxm has no FP8 tensor cores"),
    (dict(precision="bf16", gpu="h100-sxm", workers=Workers(1, Parallel(tp=1))),
     r"does not fit h100-sxm at tp = 1: weights 131.4 GiB .* give a larger tp \(e.g. 2\)"),
])
def test_bad_deployments_name_the_field_and_the_fix(kw, match):
    with pytest.raises(HarnessError, match=match):
        predict(_dep(**kw), Workload(1024, 128, concurrency=1, requests=1), calibration="none")


def test_tp_that_does_not_divide_the_heads_is_refused():
    with pytest.raises(HarnessError, match=r"tp = 3 does not divide the 64 attention heads of llama-3.1-70b"):
        predict(_dep(workers=Workers(1, Parallel(tp=3))), Workload(1024, 128, concurrency=1, requests=1), calibration="none")


def test_cli_json_and_usage(capsys):
    rc = cli_main(["predict", "--engine", "vllm", "--gpu", "h200-sxm", "--model", "llama-3.1-8b", "--precision", "fp8",
                   "--isl", "512", "--osl", "64", "--concurrency", "4", "--requests", "8", "--calibration", "none", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["simulated"] is True and d["ttft_s"]["count"] == 8 and d["schema_version"] == 1
    assert cli_main(["predict", "--engine", "vllm", "--gpu", "h200-sxm", "--model", "llama-3.1-8b",
                     "--isl", "512", "--osl", "64"]) == 2
    assert "needs --concurrency N" in capsys.readouterr().err


def test_benchmark_one_point(benchmark, speed_goals_judged):
    # the default calibration, as users run it: the h200-sxm database entry's kernel grids (no aiconfigurator needed)
    d, w = _dep(), Workload(1024, 1024, concurrency=64)
    predict(d, w)  # the entry read and the step model of this shape built once, as in a sweep
    p = benchmark(predict, d, w)
    assert p.ttft_s.count == 256 and "kernel grids" in p.calibration
    if speed_goals_judged:
        assert benchmark.stats["median"] < 1.0, "harness predict must answer in under 1 s a point"


def test_overlap_schedulers_stream_one_step_later():
    w = Workload(1024, 64, concurrency=1, requests=4, warmup_requests=0)
    base = dict(gpu="h200-sxm", model="llama-3.1-8b", precision="fp8", workers=Workers(1, Parallel(tp=1)))
    v = predict(Deployment("vllm", **base), w, calibration="none")
    s = predict(Deployment("sglang", **base), w, calibration="none")
    # alone on the engine, both prefill the same prompt; SGLang's token comes one decode step (its TPOT) later
    assert s.ttft_s.mean - v.ttft_s.mean == pytest.approx(s.tpot_s.mean, rel=0.05)
    assert any("overlap scheduler" in n for n in s.notes) and not any("overlap scheduler" in n for n in v.notes)
