"""The CPU loop's steps on their own: calibrate and predict the isolated stages, the served points' comparison by the
loop's rules (targets, contention, cut points, capacity), the two verdicts, and the loop report's format history."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "specs"))

from harness.errors import HarnessError  # noqa: E402
from harness.loop.calibrate import calibrate_cpu, host_gpu_spec  # noqa: E402
from harness.loop.compare import compare_point, compare_points, compare_stages, term_verdict, verdicts  # noqa: E402
from harness.loop.measure import CpuShare, busy_union_s, saturated_rate  # noqa: E402
from harness.loop.predict import predict_stages  # noqa: E402
from harness.loop.state import MeasuredPoint, PlannedPoint, RunResult  # noqa: E402
from harness.loop_records.report import LOOP_REPORT_SCHEMA_VERSION, LoadRun, LoopReport  # noqa: E402
from harness.loop_records.stages import CpuConstants, StageMeasurement, StagePrediction  # noqa: E402
from harness.model.forward import decode_step_work, prefill_work  # noqa: E402
from harness.served import Percentiles, ServedMeasurement, ServedPoint, ServedPrediction  # noqa: E402
from harness.specs.gguf_model import read_gguf  # noqa: E402
from harness.target.stage_requests import StageShape  # noqa: E402
from test_gguf_model import write_gguf  # noqa: E402
from workloads.mixes import single_turn  # noqa: E402
from workloads.schedule import make_schedule  # noqa: E402


def consts(c_mm: float, b_ws: float) -> CpuConstants:
    return CpuConstants(2, c_mm, {}, b_ws, 1.0, None, None, None, "test", "known constants")


@pytest.fixture
def tiny(tmp_path):
    return read_gguf(write_gguf(tmp_path / "m.gguf", tied=False))


def test_prediction_is_the_chapter_roofline(tiny):
    c = consts(50e9, 20e9)
    p = {x.quantity: x for x in predict_stages(tiny, c, StageShape(64, 8, 9), (1, 4))}
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
    p = StagePrediction("decode_tokens_per_s@1", 250.0, "memory", 0.001, 0.004, 1e6, 200e6, "")
    v = term_verdict(p, 125.0)
    assert "memory term is 2.00× too small" in v and "25 GB/s" in v  # 200 MB in 8 ms
    assert term_verdict(p, 240.0).startswith("within 20%")
    assert "faster than the memory term" in term_verdict(p, 1000.0)
    # a rate ending in _per_s is not a duration: 512 tokens at 400/s = 1.28 s predicted, 2.56 s measured
    r = StagePrediction("prefill_tokens_per_s", 400.0, "compute", 1.28, 0.03, 100e9, 1e8, "")
    assert "compute term is 2.00× too small" in term_verdict(r, 200.0)
    t = StagePrediction("ttft_s", 0.010, "compute", 0.010, 0.001, 1e9, 1e6, "")
    assert "compute term is 3.00× too small" in term_verdict(t, 0.030)


def test_the_stage_error_is_a_signed_fraction():
    p = [StagePrediction("prefill_tokens_per_s", 200.0, "compute", 1.0, 0.1, 1.0, 1.0, "")]
    m = [StageMeasurement("prefill_tokens_per_s", 100.0, 90.0, (100.0,), "")]
    (c,) = compare_stages(p, m)
    assert c.error == pytest.approx(1.0) and c.measured_client == 90.0


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
    p = [StagePrediction("decode_tokens_per_s@1", 40.0, "memory", 0.005, 0.025, 1.0, 1.0, "")]
    (ok,) = compare_stages(p, [StageMeasurement("decode_tokens_per_s@1", 40.0, 39.0, (40.0,), "", engine_cpu_share=0.97)])
    assert not ok.contended and not ok.verdict.startswith("CONTENDED")
    (bad,) = compare_stages(p, [StageMeasurement("decode_tokens_per_s@1", 10.0, 9.0, (10.0,), "", engine_cpu_share=0.45)])
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


def test_the_measurement_counts_tokens_in_the_window_like_the_twin():
    # ten requests finishing at 1..10 s, each emitting one token per 0.5 s over its last 2 s (4 chunks, 4 tokens)
    fin = [float(i) for i in range(1, 11)]
    chunks = [[f - 1.5, f - 1.0, f - 0.5, f] for f in fin]
    # window [3, 9) (the 20th and 80th percentile completions): two tokens every half second = 24 tokens in 6 s,
    # over 4 tokens a request = 1 request/s, as the steady completions say
    assert saturated_rate(fin, chunks, [4.0] * 10) == pytest.approx(1.0)
    assert saturated_rate(fin) == pytest.approx(1.0)
    assert saturated_rate(fin[:9], chunks[:9], [4.0] * 9) is None  # fewer than 10 completions


# ---------------------------------------------------------------- served points: the loop's rules

def point(index=0, rate=1.0, fraction=0.8, burst=False, count=10):
    pt = ServedPoint(512, 64, rate_per_s=math.inf if burst else rate, workload="512/64", index=index)
    art = single_turn("t", make_schedule("trace", timestamps_s=[0.0 if burst else float(i) for i in range(count)]),
                      input_tokens=512, output_tokens=64, api="completions", seed=index)
    return pt, art


def planned(index=0, rate=1.0, fraction=0.8, ttft=0.5, tpot=0.02, capacity=1.0, burst=False):
    pt, art = point(index, rate, fraction, burst)
    pred = ServedPrediction(pt, "twin (test)", ttft_s=Percentiles(10, p50=ttft, p90=2 * ttft), tpot_s=Percentiles(10, p50=tpot),
                            e2e_s=Percentiles(10, p50=2.0), request_throughput_per_s=None if burst else 1.0,
                            capacity_requests_per_s=capacity)
    return PlannedPoint(pt, math.inf if burst else fraction, art, pred, 0.01)


def run(p: PlannedPoint, ttft=0.5, tpot=0.02, served_rps=1.0, saturated=1.0, share=0.95, errors=None, ok=None, repeat=0):
    n = p.artifact.count
    ok = n if ok is None else ok
    errors = errors if errors is not None else {"ok": ok}
    m = ServedMeasurement(p.point, f"run{repeat}", ttft_s=Percentiles(ok, p50=ttft, p90=2 * ttft), tpot_s=Percentiles(ok, p50=tpot),
                          e2e_s=Percentiles(ok, p50=2.0), request_throughput_per_s=served_rps, capacity_requests_per_s=saturated,
                          requests_ok=ok, requests_total=n)
    return RunResult(m, LoadRun(f"run{repeat}", repeat, n, ok, errors, 10.0, share))


def measured(*runs: RunResult) -> MeasuredPoint:
    return MeasuredPoint(tuple(runs), ServedMeasurement.median_of([r.served for r in runs]))


def test_ttft_and_tpot_p50_are_judged_the_rest_shown():
    p = planned(ttft=0.54, tpot=0.025)
    c = compare_point(p, measured(run(p)))
    by = {r.metric: r for r in c.rows}
    assert list(by) == ["request_throughput_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "e2e_p50_s"]
    assert by["ttft_p50_s"].error == pytest.approx(0.08) and by["ttft_p50_s"].within is True
    assert by["tpot_p50_s"].error == pytest.approx(0.25) and by["tpot_p50_s"].within is False
    assert by["e2e_p50_s"].within is None and by["ttft_p90_s"].target is None  # reported, not judged


def test_a_contended_or_cut_point_is_not_judged():
    p = planned(ttft=0.54)
    cont = compare_point(p, measured(run(p, share=0.5)))
    assert not cont.judged and "contended: the engine got 50% of its cores" in cont.row("ttft_p50_s").note
    assert cont.row("e2e_p50_s").note == ""  # only the judged figures say why they are not
    cut = compare_point(p, measured(run(p, errors={"ok": 8, "cancelled": 3}, ok=8)))
    assert not cut.judged and "3 requests were still running at the drain limit" in cut.row("tpot_p50_s").note
    whole = compare_point(p, measured(run(p)))
    assert whole.judged and not any(r.note for r in whole.rows)


def test_the_capacity_at_an_overloaded_point_is_judged_only_when_saturated():
    p = planned(rate=1.2, fraction=1.2, capacity=1.02)
    sat = compare_point(p, measured(run(p, served_rps=1.0, saturated=1.0)), capacity_here=True).row("capacity_requests_per_s")
    assert sat.within is True and sat.error == pytest.approx(0.02) and sat.target == 0.05
    lb = compare_point(p, measured(run(p, served_rps=1.19, saturated=1.19)), capacity_here=True).row("capacity_requests_per_s")
    assert lb.within is None and "lower bound" in lb.note
    # the mix's most overloaded point, when the mix had no burst, is where compare_points reads the capacity
    low = planned(index=1, rate=0.5, fraction=0.5)
    rows = compare_points([low, p], {1: measured(run(low)), 0: measured(run(p))})
    assert rows[0].row("capacity_requests_per_s") is None and rows[1].row("capacity_requests_per_s") is not None


def test_a_burst_is_judged_when_every_request_of_every_repeat_completed():
    import numpy as np

    b = planned(index=8, burst=True, capacity=1.03)
    ok = compare_point(b, measured(run(b, saturated=1.0)))
    assert [r.metric for r in ok.rows] == ["capacity_requests_per_s"]
    row = ok.row("capacity_requests_per_s")
    assert row.within is True and row.error == pytest.approx(0.03) and "10 requests sent at once" in row.note
    miss = compare_point(planned(index=8, burst=True, capacity=1.2), measured(run(b, saturated=np.float64(1.0))))
    assert miss.row("capacity_requests_per_s").within is False and type(miss.row("capacity_requests_per_s").within) is bool
    assert "all at once" in verdicts([miss], {})[0].failures[0]
    part = compare_point(b, measured(run(b, ok=8, errors={"ok": 8, "timeout": 2})))
    assert part.row("capacity_requests_per_s").within is None and "only 8 of 10 completed" in part.row("capacity_requests_per_s").note
    two = measured(run(b, saturated=0.20), run(b, saturated=0.22, repeat=1))
    rep = compare_point(planned(index=8, burst=True, capacity=0.2), two).row("capacity_requests_per_s")
    assert rep.repeat_values == (0.20, 0.22) and rep.measured == pytest.approx(0.21) and rep.within is True
    short = measured(run(b, saturated=0.20), run(b, saturated=0.22, ok=9, errors={"ok": 9, "timeout": 1}, repeat=1))
    assert "only 19 of 20 completed" in compare_point(b, short).row("capacity_requests_per_s").note


def test_repeats_are_the_median_and_each_is_kept():
    p = planned(ttft=1.1)
    m = measured(run(p, ttft=1.0), run(p, ttft=1.4, repeat=1), run(p, ttft=1.1, repeat=2))
    assert m.measurement.figure("ttft_p50_s") == pytest.approx(1.1) and m.measurement.requests_ok == 30
    row = compare_point(p, m).row("ttft_p50_s")
    assert row.repeat_values == (1.0, 1.4, 1.1) and row.within is True
    assert compare_point(p, m).row("e2e_p50_s").repeat_values == (2.0, 2.0, 2.0)


def test_both_verdicts():
    """Absolute: N of M within target. Repeatability: median |twin error| against what one more repeat is expected to
    miss the repeats' median by (pairwise difference × √((1 + 1/n) / 2)); the twin matches when the ratio is ≤ 1."""
    pts = [planned(index=i, ttft=t, tpot=0.02) for i, t in enumerate((1.02, 1.3, 0.98))]
    runs = {0: measured(run(pts[0], ttft=0.95), run(pts[0], ttft=1.05, repeat=1)),  # twin +2 %, repeats 10 % apart
            1: measured(run(pts[1], ttft=0.95), run(pts[1], ttft=1.05, repeat=1)),  # twin +30 %
            2: measured(run(pts[2], ttft=0.98), run(pts[2], ttft=1.02, repeat=1, share=0.5))}  # contended: not judged
    rows = compare_points(pts, runs)
    v, r = verdicts(rows, runs)
    assert (v.judged, v.within, v.contended_points, v.points) == (4, 3, 1, 3) and "ttft_p50_s +30.0% (target ±10%)" in v.failures[0]
    # judged figures: TTFT e = 0.02, 0.30; TPOT e = 0, 0 (repeats equal: d = 0)
    d = 0.1 * math.sqrt((1 + 1 / 2) / 2)
    assert r.figures == 4 and r.repeats == 2
    assert r.twin_error == pytest.approx(0.01) and r.repeat_error == pytest.approx(d / 2)
    assert r.ratio == pytest.approx(0.01 / (d / 2)) and r.ratio_low <= r.ratio <= r.ratio_high
    # 0.95 taken for 1.05 is -9.5 % (within), 1.05 for 0.95 +10.5 % (not); the TPOT repeats are equal: 6 of 8 pairs
    assert r.within == 3 and r.pairs_within == pytest.approx(0.75)
    assert ("MATCHES" in r.text()) == r.matches
    once = {i: measured(run(p, ttft=1.0)) for i, p in enumerate(pts)}
    assert verdicts(compare_points(pts, once), once)[1] is None  # one run a point: no repeatability verdict


def test_loop_report_round_trips_and_old_versions_load():
    rep = LoopReport("loop-cpu", {"gguf": "m.gguf"}, {"name": "llama.cpp"},
                     LoopReport.from_dict({"schema_version": 1, "comparisons": [], "settings": {}}).settings)
    assert LoopReport.from_dict(json.loads(json.dumps(rep.to_dict()))) == rep
    with pytest.raises(HarnessError, match="newer than this harness understands"):
        LoopReport.from_dict({**rep.to_dict(), "schema_version": LOOP_REPORT_SCHEMA_VERSION + 1})
    # an unversioned stages-only file (format 1) and a version-2 one read as complete, no points
    assert LoopReport.from_dict({"comparisons": [], "settings": {}}).status == "complete"
    v2 = LoopReport.from_dict({"schema_version": 2, "comparisons": [], "settings": {}, "status": "complete", "served": [],
                               "checks": [{"phase": "prefill", "rep": 0, "client_ttft_s": 0.1, "engine_prompt_s": 0.09,
                                           "ttft_minus_engine_prompt_s": 0.01, "engine_prompt_tokens": 8, "usage_prompt_tokens": 8,
                                           "client_chunks": 1, "usage_completion_tokens": 1, "engine_predicted_tokens": 1,
                                           "chunks_minus_usage": 0, "engine_decode_s": None, "client_decode_s": None,
                                           "e2e_s": 0.1, "error": None}]})
    assert v2.checks[0].window == 0 and v2.points == ()


V3 = Path(__file__).resolve().parents[1] / "data" / "loop_report_v3.json"


def test_a_stored_version_3_report_upgrades_to_the_shared_records():
    """A loop_report.json written by the loop before harness.served (percent errors, capacity_rps): the same points,
    errors as fractions, the capacity burst a point of its own, the verdict kept."""
    raw = json.loads(V3.read_text())
    rep = LoopReport.from_dict(raw)
    old_rows = raw["served_comparisons"]
    assert len([x for c in rep.comparisons for x in c.rows]) == len(old_rows)
    by = {(c.point.index, x.metric): x for c in rep.comparisons for x in c.rows}
    for r in old_rows:
        x = by[(r["point"], "capacity_requests_per_s" if r["metric"] == "capacity_rps" else r["metric"])]
        assert x.measured == r["measured"] and x.within == r["met"]
        assert (x.error is None) == (r["error_pct"] is None) and (x.error is None or x.error == pytest.approx(r["error_pct"] / 100))
    assert rep.verdict.judged == raw["verdict"]["judged"] and rep.verdict.within == raw["verdict"]["met"]
    bursts = [p for p in rep.points if p.burst]
    assert bursts and all(p.measurement.figure("capacity_requests_per_s") is not None for p in bursts)
    assert rep.kind == "loop-cpu" and rep.settings.config == raw["settings"]["config"]
    assert rep.settings.repeats == 2  # not stored in format 3: read off the repeats the comparisons kept
    from harness.report.loop import render_text

    md = render_text(rep)  # an old run renders like a new one
    assert "## Served load" in md and "| capacity_requests_per_s |" in md and "nothing judged" in md
