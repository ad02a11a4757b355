"""The loop's steps: the roofline prediction from known constants, the verdict arithmetic, a real calibration,
the contention guard, and the served-load comparison and verdict."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package reads GGUF files; pip install -e .")

from harness.errors import HarnessError  # noqa: E402
from harness.loop.calibrate import CpuConstants, calibrate_cpu, host_gpu_spec  # noqa: E402
from harness.loop.compare import compare, compare_capacity, compare_capacity_burst, compare_served, served_verdict, verdict  # noqa: E402
from harness.loop.measure import CpuShare, Measured, busy_union_s, saturated_rate  # noqa: E402
from harness.loop.predict import Predicted, predict  # noqa: E402
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


def test_contended_measurement_is_flagged():
    p = [Predicted("decode_tokens_per_s@1", 40.0, "memory", 0.005, 0.025, 1.0, 1.0, "")]
    (ok,) = compare(p, [Measured("decode_tokens_per_s@1", 40.0, 39.0, (40.0,), "", engine_cpu_share=0.97)])
    assert not ok.contended and not ok.verdict.startswith("CONTENDED")
    (bad,) = compare(p, [Measured("decode_tokens_per_s@1", 10.0, 9.0, (10.0,), "", engine_cpu_share=0.45)])
    assert bad.contended and bad.verdict.startswith("CONTENDED: the engine got 45% of its cores")


def test_cpu_share_arithmetic(monkeypatch):
    # 1.5 CPU-s over 1 s of wall on 2 threads = 75 %: under the 85 % guard
    cpu = iter([10.0, 11.5])
    wall = iter([100.0, 101.0])
    monkeypatch.setattr("harness.loop.measure.process_cpu_s", lambda pid: next(cpu))
    monkeypatch.setattr("harness.loop.measure.time.perf_counter", lambda: next(wall))
    cs = CpuShare(123, 2)
    assert cs.share() == pytest.approx(0.75)
    assert CpuShare.SHARE_OK == 0.85


def test_cpu_share_reads_this_process():
    cs = CpuShare(os.getpid(), 1)
    t_end = time.perf_counter() + 0.05
    while time.perf_counter() < t_end:
        pass
    share = cs.share()
    assert share is not None and share >= 0.0  # the figure exists; its size depends on the machine's load


def test_busy_union_and_saturated_rate():
    assert busy_union_s([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    assert busy_union_s([]) == 0.0
    assert saturated_rate([0.0, 1.0]) is None
    assert saturated_rate([float(i) for i in range(11)]) == pytest.approx(1.0)


class _Fig:
    def __init__(self, **kw):
        self.__dict__.update({"request_throughput_per_s": 1.0, "ttft_p50_s": 0.5, "ttft_p90_s": 0.9, "tpot_p50_s": 0.02,
                              "e2e_p50_s": 2.0, "engine_cpu_share": 0.95, "contended": False, "saturated_rps": 1.0, **kw})


def test_served_comparison_targets_and_contention():
    pred = _Fig(ttft_p50_s=0.54, tpot_p50_s=0.025)
    rows = compare_served("512/64", 0, 1.0, 0.8, pred, _Fig())
    by = {r.metric: r for r in rows}
    assert by["ttft_p50_s"].error_pct == pytest.approx(8.0) and by["ttft_p50_s"].met is True
    assert by["tpot_p50_s"].error_pct == pytest.approx(25.0) and by["tpot_p50_s"].met is False
    assert by["e2e_p50_s"].met is None  # reported, not judged
    cont = compare_served("512/64", 1, 1.0, 0.8, pred, _Fig(engine_cpu_share=0.5, contended=True))
    assert all(r.contended and r.met is None for r in cont)
    v = served_verdict(rows + cont)
    assert (v.judged, v.met, v.contended_points, v.points) == (2, 1, 1, 2) and not v.all_met
    assert "tpot_p50_s +25.0%" in v.failures[0]


def test_capacity_is_judged_only_when_saturated():
    ok = compare_capacity("m", 3, 2.0, 1.2, 1.02, _Fig(request_throughput_per_s=1.0, saturated_rps=1.0))
    assert ok.met is True and ok.error_pct == pytest.approx(2.0)
    lb = compare_capacity("m", 3, 2.0, 1.2, 1.02, _Fig(request_throughput_per_s=1.99, saturated_rps=1.99))
    assert lb.met is None and "lower bound" in lb.note


def test_capacity_burst_is_judged_when_every_request_completed():
    import numpy as np

    ok = compare_capacity_burst("m", 8, 24, 1.03, _Fig(requests_ok=24, errors_by_class={}, saturated_rps=1.0))
    assert ok.met is True and ok.error_pct == pytest.approx(3.0) and math.isinf(ok.rate_per_s) and "24 requests sent at once" in ok.note
    miss = compare_capacity_burst("m", 8, 24, 1.2, _Fig(requests_ok=24, errors_by_class={}, saturated_rps=np.float64(1.0)))
    assert miss.met is False and type(miss.met) is bool
    assert "a burst" in served_verdict([miss]).failures[0]
    part = compare_capacity_burst("m", 8, 24, 1.0, _Fig(requests_ok=20, errors_by_class={"timeout": 4}, saturated_rps=1.0))
    assert part.met is None and "only 20 of 24" in part.note
    cont = compare_capacity_burst("m", 8, 24, 1.0, _Fig(requests_ok=24, errors_by_class={}, contended=True, engine_cpu_share=0.5))
    assert cont.met is None and cont.contended


def test_the_capacity_estimator_is_not_fooled_by_completion_waves():
    """A burst into idle slots finishes its requests a slot-full at a time. Counting completions between the 20th and
    80th percentile completion then counts the opening wave's other members (+21 % here); counting the tokens emitted in
    that window (harness.target.saturation, used by the twin and the measurement alike) does not."""
    import numpy as np

    from harness.loop.predict import burst_capacity, capacity_workload
    from harness.target.des import simulate
    from harness.target.llama_server import LlamaServerSettings
    from harness.target.twin import TwinSpec, requests_from_rows

    class Steps:
        def prefill_time_s(self, p, cached=0):
            return 1e-3 * p

        def decode_step_time_s(self, b, ctx):
            return 0.01 + 0.002 * b

    twin = TwinSpec("llama.cpp", LlamaServerSettings(slots=4, ctx_size=8192), Steps(), "m", "test steps")
    art = capacity_workload((64, 32), 24, seed=0)
    assert art.count == 24 and all(r["intended_s"] == 0.0 for r in art.rows)
    got = burst_capacity(twin, art)
    fin = np.sort(simulate(twin.make_scheduler, requests_from_rows(art.rows)).finished_s)
    steady = 4 / float(np.median(np.diff(fin[3::4])))  # one round of four requests per wave period
    assert got["requests_per_s"] == pytest.approx(steady, rel=0.05)
    assert got["output_tokens_per_s"] == pytest.approx(32 * got["requests_per_s"]) and got["burst_requests"] == 24
    assert saturated_rate(list(fin)) > 1.15 * steady  # the completion count is fooled by the waves
    with pytest.raises(HarnessError, match="--capacity-requests"):
        capacity_workload((64, 32), 5, seed=0)


def test_the_measurement_counts_tokens_in_the_window_like_the_twin():
    # ten requests finishing at 1..10 s, each emitting one token per 0.5 s over its last 2 s (4 chunks, 4 tokens)
    fin = [float(i) for i in range(1, 11)]
    chunks = [[f - 1.5, f - 1.0, f - 0.5, f] for f in fin]
    # window [3, 9) (the 20th and 80th percentile completions): two tokens every half second = 24 tokens in 6 s,
    # over 4 tokens a request = 1 request/s, as the steady completions say
    assert saturated_rate(fin, chunks, [4.0] * 10) == pytest.approx(1.0)
    assert saturated_rate(fin) == pytest.approx(1.0)
    assert saturated_rate(fin[:9], chunks[:9], [4.0] * 9) is None  # fewer than 10 completions


def test_a_missed_target_is_a_plain_false_even_from_numpy_figures():
    """A numpy bool is not `False`: the report printed such a miss as "(not judged)" beside a verdict listing it."""
    import numpy as np

    miss = compare_capacity("m", 3, 2.0, 1.2, 1.2, _Fig(request_throughput_per_s=np.float64(1.0), saturated_rps=np.float64(1.0)))
    assert miss.met is False
    rows = compare_served("512/64", 1, 1.0, 0.8, _Fig(ttft_p50_s=np.float64(2.0), tpot_p50_s=np.float64(0.05)),
                          _Fig(ttft_p50_s=np.float64(1.0), tpot_p50_s=np.float64(0.05)))
    assert {r.metric: r.met for r in rows if r.met is not None} == {"ttft_p50_s": False, "tpot_p50_s": True}
    assert all(type(r.met) is bool for r in rows if r.met is not None)


def test_loop_report_version_matches_the_store_and_v1_upgrades(tmp_path):
    import json

    from harness.loop.report import LOOP_REPORT_SCHEMA_VERSION
    from harness.records import new_manifest
    from harness.store import SIDECAR_VERSIONS, Run, RunWriter

    assert SIDECAR_VERSIONS["loop_report.json"] == LOOP_REPORT_SCHEMA_VERSION == 3
    with RunWriter(new_manifest("loop-cpu"), tmp_path) as w:
        path = w.path
    (path / "loop_report.json").write_text(json.dumps({"comparisons": [], "settings": {}}))  # a stages-only, unversioned file
    d = Run(path).json("loop_report.json")
    assert d["schema_version"] == 3 and d["status"] == "complete" and d["served"] == [] and d["stage_windows"] == []
    # a version-2 report (one stage window): its points and requests read as window 0's
    v2 = {"schema_version": 2, "comparisons": [], "settings": {}, "status": "complete", "served": [{"point": 0}],
          "checks": [{"phase": "prefill"}]}
    (path / "loop_report.json").write_text(json.dumps(v2))
    d = Run(path).json("loop_report.json")
    assert d["served"][0]["stage_windows"] == [0] and d["checks"][0]["window"] == 0 and d["window_verdicts"] == {}


def test_a_point_cut_at_the_drain_limit_is_not_judged():
    cut = compare_served("512/64", 2, 1.0, 1.2, _Fig(), _Fig(errors_by_class={"ok": 8, "cancelled": 3}))
    assert all(r.met is None for r in cut) and all("3 requests" in r.note for r in cut if r.target_pct)
    whole = compare_served("512/64", 2, 1.0, 1.2, _Fig(), _Fig(errors_by_class={"ok": 11}))
    assert any(r.met is True for r in whole) and not any(r.note for r in whole)


def test_speed_probe_scales_against_its_reference_and_clamps_glitches():
    from harness.loop.run import PROBE_SCALE_BOUNDS, SpeedProbe, scaled_twin
    from harness.target.llama_server import LlamaServerSettings
    from harness.target.twin import TwinSpec

    seq = iter([0.020, 0.022, 0.018, 0.100, None])
    p = SpeedProbe(lambda: next(seq))
    assert p.scale() is None  # no reference yet
    assert p.reference() == 0.020
    assert p.scale() == pytest.approx(1.1) and p.scale() == pytest.approx(0.9)
    assert p.scale() == PROBE_SCALE_BOUNDS[1]  # 5x the reference: a glitch, clamped
    assert p.scale() is None  # the probe measured nothing
    assert [f for _, f in p.history] == pytest.approx([1.1, 0.9, 2.0])
    twin = TwinSpec("llama.cpp", LlamaServerSettings(slots=2, ctx_size=4096), object(), "m", "s")
    assert scaled_twin(twin, 1.25).settings.step_scale == 1.25 and scaled_twin(twin, None) is twin


def test_step_scale_multiplies_every_iteration():
    from harness.target.des import ArrivingRequest, simulate
    from harness.target.llama_server import LlamaServerScheduler, LlamaServerSettings

    class Steps:
        def prefill_time_s(self, p, cached=0):
            return 1e-3 * p

        def decode_step_time_s(self, b, ctx):
            return 0.010

    def run(scale):
        st = LlamaServerSettings(slots=1, ctx_size=4096, iteration_overhead_s=0.002, step_scale=scale)
        return simulate(lambda: LlamaServerScheduler(st, Steps()), [ArrivingRequest(0.0, 50, 11)]).finished_s[0]

    assert run(1.5) == pytest.approx(1.5 * run(1.0))
    with pytest.raises(HarnessError, match="step_scale"):
        run(0.0)


def test_repeats_are_combined_by_median_and_their_spread_shown():
    from harness.loop.compare import repeat_spread_pct
    from harness.loop.measure import ServedMeasurement, combine_repeats

    def m(ttft, tpot, share, run):
        return ServedMeasurement("512/64", 1.0, run, 10, 10, {"ok": 10}, 1.0, 64.0, ttft, 2 * ttft, tpot, 5.0, None, 9.0, share,
                                 512.0, 64.0)

    ms = [m(1.0, 0.05, 0.95, "a"), m(1.2, 0.06, 0.80, "b"), m(1.1, None, 0.97, "c")]
    c = combine_repeats(ms)
    assert c.ttft_p50_s == pytest.approx(1.1) and c.tpot_p50_s == pytest.approx(0.055) and c.run_dir == "a"
    assert c.requests_ok == 30 and c.errors_by_class == {"ok": 30} and c.engine_cpu_share == 0.80 and c.contended
    assert combine_repeats(ms[:1]) is ms[0]
    assert repeat_spread_pct([1.0, 1.2, 1.1]) == pytest.approx(20 / 1.1) and repeat_spread_pct([1.0, None]) is None
    rows = compare_served("512/64", 0, 1.0, 0.5, _Fig(ttft_p50_s=1.1, tpot_p50_s=0.05), _Fig(ttft_p50_s=1.1, tpot_p50_s=0.05),
                          repeats=[_Fig(ttft_p50_s=1.0), _Fig(ttft_p50_s=1.4)])
    by = {r.metric: r for r in rows}
    assert "2 repeats of the same workload: 1000 ms, 1400 ms (spread 33 % of the median, wider than the target)" in by["ttft_p50_s"].note
    assert by["e2e_p50_s"].note == ""  # only judged figures carry the spread
    with pytest.raises(HarnessError, match="--repeats"):
        from harness.loop.run import LoopOptions

        LoopOptions(repeats=0)


def test_repeatability_counts_how_often_the_engine_predicts_itself_within_target():
    """Each repeat taken as the prediction of every other (ordered pairs): 1.00/1.08 is within 10 % both ways, 1.0/1.3
    neither way; three repeats 1.0, 1.05, 1.3: 2 of the 6 ordered pairs. Repeats more than (1+t)/(1−t) apart leave no
    prediction within target of them all."""
    from harness.loop.compare import ServedComparison, repeatability_summary

    def row(pred, reps, metric="ttft_p50_s", tgt=10.0):
        meas = sorted(reps)[len(reps) // 2] if len(reps) % 2 else sum(sorted(reps)[len(reps) // 2 - 1:len(reps) // 2 + 1]) / 2
        e = (pred - meas) / meas * 100
        return ServedComparison("m", 0, 1.0, 0.5, metric, pred, meas, e, True, False, 0.97, tgt, abs(e) <= tgt, "",
                                repeat_values=tuple(reps))

    close, far, three = row(1.0, [1.0, 1.08]), row(1.0, [1.0, 1.3]), row(1.05, [1.0, 1.05, 1.3])
    assert close.repeat_agreement == 1.0 and far.repeat_agreement == 0.0 and three.repeat_agreement == pytest.approx(2 / 6)
    assert close.repeats_apart is False and far.repeats_apart is True  # 1.3 > 1.1/0.9 = 1.222
    assert row(1.0, [1.0, 1.2]).repeats_apart is False  # 1.1 is within 10 % of both 1.0 and 1.2
    cap = row(1.0, [1.0, 1.04], metric="capacity_rps", tgt=5.0)
    assert cap.repeat_agreement == 1.0 and row(1.0, [1.0, 1.06], metric="capacity_rps", tgt=5.0).repeat_agreement == 0.0
    rs = repeatability_summary([close, far, three, row(1.0, [1.0])])  # a single "repeat" is no repeatability
    assert (rs.judged, rs.repeats, rs.apart, rs.met) == (3, 3, 2, 2)
    assert rs.agreement == pytest.approx((1 + 0 + 2 / 6) / 3)
    assert "within target for 44% of the pairs (as if 1.3 of 3 figures" in rs.counts_text() and "2 of 3 within target of" in rs.counts_text()
    assert repeatability_summary([row(1.0, [1.0])]) is None
    rows = compare_served("512/64", 0, 1.0, 0.5, _Fig(ttft_p50_s=1.1, tpot_p50_s=0.05), _Fig(ttft_p50_s=1.2, tpot_p50_s=0.05),
                          repeats=[_Fig(ttft_p50_s=1.0, tpot_p50_s=0.05), _Fig(ttft_p50_s=1.4, tpot_p50_s=0.05)])
    by = {r.metric: r for r in rows}
    assert by["ttft_p50_s"].repeat_values == (1.0, 1.4) and by["ttft_p50_s"].repeat_agreement == 0.0
    assert by["tpot_p50_s"].repeat_agreement == 1.0 and by["e2e_p50_s"].repeat_values is None  # judged figures only


def test_a_repeated_burst_is_judged_on_the_median_when_every_repeat_completed():
    from harness.loop.compare import compare_capacity_burst

    reps = [_Fig(saturated_rps=0.20, requests_ok=16), _Fig(saturated_rps=0.22, requests_ok=16)]
    row = compare_capacity_burst("512/64", 8, 16, 0.2, _Fig(saturated_rps=0.21, requests_ok=32, errors_by_class={"ok": 32}),
                                 repeats=reps)
    assert row.repeat_values == (0.20, 0.22) and row.met is True and "2 repeats of the same burst: 0.200/s, 0.220/s" in row.note
    assert row.repeat_agreement == 0.0  # 0.20 and 0.22 are 10 % apart: neither within 5 % of the other
    short = compare_capacity_burst("512/64", 8, 16, 0.2, _Fig(saturated_rps=0.21, requests_ok=31, errors_by_class={"ok": 31}),
                                   repeats=reps)
    assert short.met is None and "only 31 of 32 completed" in short.note
    single = compare_capacity_burst("512/64", 8, 16, 0.2, _Fig(saturated_rps=0.21, requests_ok=16, errors_by_class={"ok": 16}))
    assert single.met is True and single.repeat_values is None


def test_a_miss_within_the_single_windows_band_is_counted_as_host_drift():
    from harness.loop.compare import ServedComparison, band_summary

    def row(pred, meas, lo=None, hi=None):
        e = (pred - meas) / meas * 100
        return ServedComparison("m", 0, 1.0, 0.5, "ttft_p50_s", pred, meas, e, True, False, 0.97, 10.0, abs(e) <= 10, "", lo, hi)

    drift = row(0.60, 0.75, lo=0.55, hi=0.70)  # 20 % off, but within 10 % of the slowest window's 0.70
    model = row(0.60, 0.90, lo=0.55, hi=0.70)  # beyond every window's prediction
    hit = row(0.60, 0.62, lo=0.55, hi=0.70)
    assert drift.within_band is True and model.within_band is False and row(0.6, 0.62).within_band is None
    assert band_summary([drift, model, hit]) == (2, 1, 1)
    assert band_summary([row(0.6, 0.9)]) is None


def test_a_median_measured_over_few_requests_is_judged_with_its_own_interval_in_view():
    from dataclasses import replace

    from harness.loop.compare import ServedComparison, precision_summary
    from harness.loop.measure import ServedMeasurement

    def row(pred, meas, lo=None, hi=None, metric="tpot_p50_s", n=None):
        e = (pred - meas) / meas * 100
        return ServedComparison("m", 0, 1.0, 0.5, metric, pred, meas, e, True, False, 0.97, 10.0, abs(e) <= 10, "",
                                meas_lo=lo, meas_hi=hi, meas_n=n if n is not None else (10 if lo is not None else None))

    # 10 TPOTs in two clusters (requests a long prompt interrupted, and those it did not): p50 61.5 ms, interval 49-112 ms
    bimodal = row(0.089, 0.0615, lo=0.049, hi=0.112)
    tight = row(0.080, 0.0615, lo=0.060, hi=0.064)  # the same miss, over a sample that pins its p50 within 10 %
    hit = row(0.062, 0.0615, lo=0.058, hi=0.066, metric="ttft_p50_s")
    few = row(0.090, 0.0615)  # under 6 requests: no interval
    assert bimodal.measured_precise is False and bimodal.predicted_in_measured_interval is True
    assert tight.measured_precise is True and tight.predicted_in_measured_interval is False
    assert few.measured_precise is None and few.predicted_in_measured_interval is None
    # n x (half-width / target)^2 over the n the interval was taken over: the wider side of 49-112 ms around 61.5 ms is
    # +82 %, so ~10 x 8.2^2 = 675 requests
    assert bimodal.requests_to_pin == math.ceil(10 * ((0.112 - 0.0615) / 0.0615 / 0.10) ** 2) == 675
    assert replace(bimodal, meas_n=7).requests_to_pin == math.ceil(7 * ((0.112 - 0.0615) / 0.0615 / 0.10) ** 2)
    assert tight.requests_to_pin is None and few.requests_to_pin is None and replace(bimodal, meas_n=None).requests_to_pin is None
    from harness.loop.render import _meas_interval

    assert _meas_interval(bimodal) == "49 ms – 112 ms (wider than the target; ~675 requests would pin it)"
    assert _meas_interval(replace(bimodal, meas_n=200)).endswith("~10,000+ requests would pin it)")
    assert _meas_interval(replace(bimodal, meas_n=None)).endswith("(wider than the target)")  # the count unknown
    assert _meas_interval(tight) == "60 ms – 64 ms" and _meas_interval(few) == "—"
    ps = precision_summary([bimodal, tight, hit, few])
    assert (ps.judged, ps.too_few, ps.precise, ps.misses, ps.misses_inside) == (4, 1, 2, 3, 1)
    assert precision_summary([few]) is None
    # compare_served takes each judged median's interval from the measurement; the others get none
    m = ServedMeasurement("m", 1.0, "run", 10, 10, {"ok": 10}, 1.0, 64.0, 1.0, 2.0, 0.0615, 5.0, None, 9.0, 0.97, 512.0, 64.0,
                          ttft_p50_interval_s=(0.9, 1.3), tpot_p50_interval_s=(0.049, 0.112), ttft_p50_interval_n=10,
                          tpot_p50_interval_n=9)
    by = {r.metric: r for r in compare_served("m", 0, 1.0, 0.5, _Fig(ttft_p50_s=1.0, tpot_p50_s=0.089), m)}
    assert (by["ttft_p50_s"].meas_lo, by["ttft_p50_s"].meas_hi, by["ttft_p50_s"].meas_n) == (0.9, 1.3, 10)
    assert (by["tpot_p50_s"].meas_lo, by["tpot_p50_s"].meas_hi, by["tpot_p50_s"].meas_n) == (0.049, 0.112, 9)
    assert by["e2e_p50_s"].meas_lo is None and by["ttft_p90_s"].meas_hi is None and by["e2e_p50_s"].meas_n is None


def test_a_figure_that_leaves_its_target_within_two_percent_of_step_time_is_ill_conditioned():
    from harness.loop.compare import ServedComparison, condition_summary

    def row(pred, meas, lo=None, hi=None):
        e = (pred - meas) / meas * 100
        return ServedComparison("m", 0, 1.0, 0.5, "ttft_p50_s", pred, meas, e, True, False, 0.97, 10.0, abs(e) <= 10, "",
                                cond_lo=lo, cond_hi=hi)

    cliff = row(0.5, 0.27, lo=0.26, hi=1.1)  # a p50 at the edge between requests that found a slot and those that waited
    steady = row(0.60, 0.80, lo=0.59, hi=0.61)  # a 2 % change moves it 2 %: a miss the step times must answer for
    hit = row(0.60, 0.62, lo=0.59, hi=0.61)
    assert cliff.ill_conditioned is True and steady.ill_conditioned is False and row(0.6, 0.6).ill_conditioned is None
    cs = condition_summary([cliff, steady, hit])
    assert (cs.misses, cs.ill_conditioned_misses, cs.well_conditioned_judged, cs.well_conditioned_met) == (2, 1, 2, 1)
    assert condition_summary([row(0.6, 0.9)]) is None


def test_conditioning_finds_the_cliff_at_a_saturated_slot_and_not_at_light_load():
    """One slot, requests arriving exactly one service time apart: 2 % slower steps and the queue grows (TTFT p50 goes
    from one prefill to seconds), 2 % faster and it never forms. At a tenth of that load the TTFT moves by ~2 %."""
    from dataclasses import replace as dc_replace

    from harness.loop.measure import ServedMeasurement
    from harness.loop.report import ServedPoint
    from harness.loop.run import LoopOptions, conditioning, served_rows
    from harness.target.des import simulate
    from harness.target.llama_server import LlamaServerSettings
    from harness.target.step_times import RooflineStepTimes
    from harness.target.twin import TwinSpec, predict_point, requests_from_rows
    from harness.specs.models import ModelSpec
    from types import SimpleNamespace

    spec = ModelSpec(name="m", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256, intermediate_size=2048,
                     vocab_size=262144, source="test", tie_word_embeddings=True)
    twin = TwinSpec("llama.cpp", LlamaServerSettings(slots=1, ctx_size=4096), RooflineStepTimes(spec, 143e9, 10.6e9, 0.92, 2.0, "t"),
                    "m", "test")
    one = requests_from_rows([{"intended_s": 0.0, "prompt_tokens_target": 256, "max_tokens": 16}])
    service_s = float(simulate(twin.make_scheduler, one).finished_s[0])
    opts = LoopOptions(point_duration_s=60.0)
    state = {"twin": twin, "served": [], "measurements": {}, "artifacts": {}, "notes": []}
    for pt, gap in ((0, service_s), (1, 10 * service_s)):
        n = int(60.0 / gap)
        rows = [{"intended_s": i * gap, "prompt_tokens_target": 256, "max_tokens": 16} for i in range(n)]
        state["artifacts"][pt] = SimpleNamespace(rows=rows)  # what the loop reads of a WorkloadArtifact
        fig = predict_point(twin.make_scheduler, requests_from_rows(rows), rate_per_s=1 / gap, span_s=60.0).to_dict()
        state["served"].append(ServedPoint("256/16", pt, 256, 16, 1 / gap, 0.99 if pt == 0 else 0.1, n, fig, None, 0.0))
        state["measurements"][pt] = ServedMeasurement("256/16", 1 / gap, "", n, n, {}, 1 / gap, 16 / gap, fig["ttft_p50_s"],
                                                      fig["ttft_p90_s"], fig["tpot_p50_s"], fig["e2e_p50_s"], None, 60.0, 0.97,
                                                      256, 16)
    conditioning(state, opts)
    rows = {(r.point, r.metric): r for r in served_rows(state)}
    sat, light = rows[(0, "ttft_p50_s")], rows[(1, "ttft_p50_s")]
    assert sat.cond_lo <= sat.predicted <= sat.cond_hi and sat.ill_conditioned is True
    assert sat.cond_hi > 2 * sat.cond_lo
    assert light.ill_conditioned is False and light.cond_hi / light.cond_lo == pytest.approx(1.04, abs=0.01)
    assert rows[(1, "tpot_p50_s")].ill_conditioned is False
    assert any(n.startswith("conditioning:") for n in state["notes"])
    # an engine without a step scale is left alone
    state2 = {**state, "twin": dc_replace(twin, engine="vllm"), "notes": []}
    state2.pop("conditioning")
    conditioning(state2, opts)
    assert "conditioning" not in state2 and not state2["notes"]


def _light_twin(slots: int = 2):
    from harness.specs.models import ModelSpec
    from harness.target.llama_server import LlamaServerSettings
    from harness.target.step_times import RooflineStepTimes
    from harness.target.twin import TwinSpec

    spec = ModelSpec(name="m", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256, intermediate_size=2048,
                     vocab_size=262144, source="test", tie_word_embeddings=True)
    return TwinSpec("llama.cpp", LlamaServerSettings(slots=slots, ctx_size=4096), RooflineStepTimes(spec, 143e9, 10.6e9, 0.92, 2.0, "t"),
                    "m", "test")


def _poisson_rows(n: int, gap_s: float, prompt: int = 256, out: int = 32, seed: int = 3) -> list[dict]:
    import random

    rng, t, rows = random.Random(seed), 0.0, []
    for _ in range(n):
        rows.append({"intended_s": t, "prompt_tokens_target": prompt, "max_tokens": out})
        t += rng.expovariate(1 / gap_s)
    return rows


def test_fit_speed_recovers_the_step_time_factor_a_point_ran_at():
    """The 'measured' E2E of every request is the twin's own at 1.25x step time: the fit finds 1.25; a host 3x slower
    than the twin lies past the search's bound (clamped at 2); no requests: None."""
    from harness.loop.speed import SPEED_SCALE_BOUNDS, fit_speed, step_scaled
    from harness.target.des import simulate
    from harness.target.twin import requests_from_rows

    twin = _light_twin()
    reqs = requests_from_rows(_poisson_rows(30, 1.5))

    def e2e_at(f: float) -> list[tuple[int, float]]:
        sim = simulate(step_scaled(twin, f).make_scheduler, reqs)
        return [(i, float(x)) for i, x in enumerate(sim.finished_s - sim.arrival_s)]

    s, clamped = fit_speed(twin, reqs, e2e_at(1.25))
    assert s == pytest.approx(1.25, rel=2e-3) and clamped is False
    assert fit_speed(twin, reqs, e2e_at(0.8)) == pytest.approx((0.8, False), rel=2e-3)
    assert fit_speed(twin, reqs, e2e_at(3.0)) == (SPEED_SCALE_BOUNDS[1], True)
    assert fit_speed(twin, reqs, e2e_at(0.3)) == (SPEED_SCALE_BOUNDS[0], True)
    assert fit_speed(twin, reqs, []) is None


def test_fit_speed_starts_from_its_guess_and_takes_few_simulations(monkeypatch):
    """The residual at s = 1 guesses log s; false position from that bracket meets the bisection's precision in a
    handful of simulations (bisecting x0.5..x2 took 18)."""
    import harness.target.des as des
    from harness.loop.speed import fit_speed, step_scaled
    from harness.target.twin import requests_from_rows

    twin = _light_twin()
    reqs = requests_from_rows(_poisson_rows(30, 1.5))
    calls = []
    simulate = des.simulate

    def counted(*a, **k):
        calls.append(1)
        return simulate(*a, **k)

    for f in (0.7, 1.0, 1.6):
        sim = simulate(step_scaled(twin, f).make_scheduler, reqs)
        measured = [(i, float(x)) for i, x in enumerate(sim.finished_s - sim.arrival_s)]
        monkeypatch.setattr(des, "simulate", counted)
        calls.clear()
        assert fit_speed(twin, reqs, measured)[0] == pytest.approx(f, rel=2e-3)
        assert len(calls) <= 10
        monkeypatch.setattr(des, "simulate", simulate)
    assert step_scaled(step_scaled(twin, 1.1), 2.0).settings.step_scale == pytest.approx(2.2)


def test_host_speed_says_which_misses_the_hosts_speed_during_the_point_explains(monkeypatch):
    """The engine ran 30 % slower than the twin that predicted the point: its TPOT p50 misses by about -23 %; the twin at
    the point's own fitted speed (x1.3) meets it, and the summary counts that miss as explained by the host's speed.
    A diagnostic: the prediction and the verdict stay as they were."""
    import harness.store as store
    import pandas as pd
    from types import SimpleNamespace

    from harness.loop.measure import ServedMeasurement
    from harness.loop.report import ServedPoint
    from harness.loop.run import LoopOptions, host_speed, served_rows
    from harness.loop.speed import step_scaled
    from harness.loop.compare import served_verdict, speed_summary
    from harness.target.des import simulate
    from harness.target.twin import predict_point, requests_from_rows

    twin = _light_twin()
    rows = _poisson_rows(40, 1.5)
    reqs = requests_from_rows(rows)
    pred = predict_point(twin.make_scheduler, reqs, rate_per_s=1 / 1.5, span_s=60.0).to_dict()
    slow = predict_point(step_scaled(twin, 1.3).make_scheduler, reqs, rate_per_s=1 / 1.5, span_s=60.0).to_dict()
    sim = simulate(step_scaled(twin, 1.3).make_scheduler, reqs)
    table = pd.DataFrame({"request_index": range(len(rows)), "error_class": "ok", "e2e_s": sim.finished_s - sim.arrival_s})
    monkeypatch.setattr(store, "Run", lambda d: SimpleNamespace(table=lambda name: table))
    state = {"twin": twin, "served": [ServedPoint("256/32", 0, 256, 32, 1 / 1.5, 0.5, len(rows), pred, None, 0.0)],
             "measurements": {0: ServedMeasurement("256/32", 1 / 1.5, "run", len(rows), len(rows), {}, 1 / 1.5, 32 / 1.5,
                                                   slow["ttft_p50_s"], slow["ttft_p90_s"], slow["tpot_p50_s"], slow["e2e_p50_s"],
                                                   None, 60.0, 0.97, 256, 32)},
             "artifacts": {0: SimpleNamespace(rows=rows)}, "notes": []}
    before = served_rows(state)
    host_speed(state, LoopOptions(point_duration_s=60.0))
    after = {r.metric: r for r in served_rows(state)}
    tpot = after["tpot_p50_s"]
    assert tpot.met is False and tpot.error_pct == pytest.approx(100 * (pred["tpot_p50_s"] / slow["tpot_p50_s"] - 1))
    assert tpot.speed_scale == pytest.approx(1.3, rel=5e-3) and tpot.at_speed == pytest.approx(slow["tpot_p50_s"], rel=0.02)
    assert tpot.met_at_speed is True and after["ttft_p50_s"].met_at_speed is True
    assert after["ttft_p90_s"].at_speed is None and after["e2e_p50_s"].at_speed is None  # only the judged metrics
    ss = speed_summary(list(after.values()))
    assert ss.misses >= 1 and ss.misses_met_at_speed == ss.misses and ss.scale_lo == ss.scale_hi == tpot.speed_scale
    assert served_verdict(before) == served_verdict(list(after.values()))  # the verdict is unchanged
    assert [(r.metric, r.predicted) for r in before] == [(r.metric, r.predicted) for r in after.values()]
    assert any(n.startswith("host speed per point (a diagnostic, not held out)") for n in state["notes"])


def test_host_speed_is_a_diagnostic_a_failure_is_a_note(monkeypatch):
    import harness.store as store
    from types import SimpleNamespace

    from harness.loop.measure import ServedMeasurement
    from harness.loop.report import ServedPoint
    from harness.loop.run import LoopOptions, host_speed

    def broken(d):
        raise OSError(f"no such run: {d}")

    monkeypatch.setattr(store, "Run", broken)
    rows = _poisson_rows(5, 2.0)
    fig = {"ttft_p50_s": 0.1, "ttft_p90_s": 0.2, "tpot_p50_s": 0.01, "e2e_p50_s": 0.5}
    state = {"twin": _light_twin(), "served": [ServedPoint("256/32", 0, 256, 32, 0.5, 0.5, 5, fig, None, 0.0)],
             "measurements": {0: ServedMeasurement("256/32", 0.5, "gone", 5, 5, {}, 0.5, 16, 0.1, 0.2, 0.01, 0.5, None, 10.0,
                                                   0.97, 256, 32)},
             "artifacts": {0: SimpleNamespace(rows=rows)}, "notes": []}
    host_speed(state, LoopOptions(point_duration_s=10.0))
    assert "speed" not in state and state["notes"] == ["host speed per point not fitted (OSError: no such run: gone)"]
