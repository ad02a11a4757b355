"""The step-time fit from stored llama.cpp micro runs: tool output -> micro_cases -> points -> constants."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.calibration.step_time import WorkModel, fit_from_runs, points_from_runs
from harness.errors import HarnessError
from harness.model.step_time import StepConstants, calibrated_step_s
from harness.records import new_manifest
from harness.specs.models import ModelSpec
from harness.store import RunWriter
from microbench.llama_cpp import batched_bench

GEMMA = ModelSpec(name="gemma-3-270m", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256,
                  intermediate_size=2048, vocab_size=262144, source="test", tie_word_embeddings=True)
WM = WorkModel(GEMMA, 0.92, 2.0, 512, "gemma-3-270m (gemma3, MOSTLY_Q4_K_M, 253113024 bytes)")
DEC = StepConstants(3e-3, 1 / 11e9, 1 / 50e9)
PRE = StepConstants(20e-3, 0.0, 1 / 150e9)


def _batched_text(seed: int) -> str:
    """llama-batched-bench jsonl lines (the tool's exact keys) with times from known constants and 1 % noise."""
    rng = np.random.default_rng(seed)
    lines = []
    for pp in (32, 128, 256, 512, 1024):
        for pl in (1, 2, 4):
            tg = 16
            t_pp = sum(calibrated_step_s(PRE, c) for c in WM.prefill_work(pp)) * pl * (1 + 0.01 * rng.standard_normal())
            step = calibrated_step_s(DEC, WM.decode_work(pl, pp + (tg + 1) / 2)) * (1 + 0.01 * rng.standard_normal())
            lines.append(json.dumps({"n_kv_max": 4 * 1040, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": 0,
                                     "n_gpu_layers": -1, "n_threads": 2, "n_threads_batch": 2, "pp": pp, "tg": tg, "pl": pl,
                                     "n_kv": pl * (pp + tg), "t_pp": t_pp, "speed_pp": pl * pp / t_pp, "t_tg": step * tg,
                                     "speed_tg": pl / step, "t": t_pp + step * tg, "speed": 1.0}))
    return "\n".join(lines) + "\n"


def _store(root, texts, threads=2, identity=WM.identity):
    info = {"version": {"release": "b0"}, "commands": {"llama-batched-bench": ["llama-batched-bench ..."]},
            "model": {"identity": identity, "family": "ggml-q4_K_M-cpu", "work_model": {**WM.to_dict(), "identity": identity}},
            "settings": {"threads": threads, "n_ubatch": 512, "flash_attn": None, "repack": False}}
    man = new_manifest("micro", machine="cpu--test", extra={"suites": ["llama_batched_bench"], "llama_cpp": info})
    cs = batched_bench.cases(texts, dtype="q4_K_M", family="ggml-q4_K_M-cpu", work_model=WM)
    with RunWriter(man, root) as w:
        w.append("micro_cases", [c.to_row() for c in cs])
        w.append("micro_samples", [r for c in cs for r in c.sample_rows()])
    return w.path


def test_fit_from_runs_recovers_the_constants_and_labels_points(tmp_path):
    _store(tmp_path, [_batched_text(1), _batched_text(2)])
    points, wm, facts = points_from_runs(tmp_path)
    assert wm.identity == WM.identity and facts["family"] == "ggml-q4_K_M-cpu" and facts["threads"] == 2
    assert sum(p.phase == "prefill" for p in points) == 5  # batch-1 prefills only
    assert sum(p.phase == "decode" for p in points) == 15
    assert all(len(p.samples_s) == 2 for p in points)
    cal = fit_from_runs(tmp_path, n_bootstrap=50)
    assert cal.decode.constants.s_per_flop == pytest.approx(DEC.s_per_flop, rel=0.1)
    assert cal.decode.constants.alpha_s + WM.decode_work(1, 0).bytes * cal.decode.constants.s_per_byte == pytest.approx(
        DEC.alpha_s + WM.decode_work(1, 0).bytes * DEC.s_per_byte, rel=0.03)  # the batch-1 step time
    assert cal.prefill.constants.s_per_flop == pytest.approx(PRE.s_per_flop, rel=0.05)
    assert cal.decode.summary("held-out")["n"] == 5 and cal.decode.summary("held-out")["rms"] < 0.03
    assert cal.family == "ggml-q4_K_M-cpu" and cal.run_ids
    # the runs' kernel-choosing flags are recorded (flash_attn None: llama.cpp's default, auto)
    assert cal.engine_flags == {"flash_attn": "auto", "repack": False}


def test_runs_of_different_threads_are_not_mixed(tmp_path):
    _store(tmp_path, [_batched_text(1)], threads=2)
    _store(tmp_path, [_batched_text(2)], threads=1)
    with pytest.raises(HarnessError, match="differ in threads"):
        points_from_runs(tmp_path)


def test_no_llama_runs_is_a_clear_error(tmp_path):
    with pytest.raises(HarnessError, match="harness micro-llama-cpp"):
        points_from_runs(tmp_path)

