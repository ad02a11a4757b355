"""The loop report (harness.report.loop): a loop run renders as text, Markdown and HTML with its figures, from the
stored record alone; `harness report RUN` picks it for kinds loop-cpu and loop-gpu."""

from __future__ import annotations

import math

from harness.loop_records.report import LoadRun, LoopPoint, LoopReport, LoopSettings, MixCapacity
from harness.loop_records.verdict import AbsoluteVerdict, RepeatabilityVerdict
from harness.report.loop import RUN_KINDS, loop_page, render_text
from harness.served import Interval, Percentiles, ServedMeasurement, ServedPoint, ServedPrediction, compare_served


def _report() -> LoopReport:
    points, comps = [], []
    for i, (ttft, m1, m2) in enumerate(((1.05, 0.95, 1.05), (0.60, 0.50, 0.52))):
        pt = ServedPoint(512, 64, rate_per_s=0.1 * (i + 1), workload="512/64", index=i)
        pred = ServedPrediction(pt, "llama.cpp twin (test)", ttft_s=Percentiles(10, p50=ttft), tpot_s=Percentiles(10, p50=0.05))
        reps = [ServedMeasurement(pt, f"run{i}-{k}", ttft_s=Percentiles(10, p50=m), tpot_s=Percentiles(10, p50=0.05))
                for k, m in enumerate((m1, m2))]
        meas = ServedMeasurement.median_of(reps, intervals={"ttft_p50_s": Interval(0.8 * m1, 1.2 * m2, 0.95, 20, "bootstrap")})
        c = compare_served(pred, meas, targets={"ttft_p50_s": 0.10, "tpot_p50_s": 0.10}, metrics=["ttft_p50_s", "tpot_p50_s"])
        comps.append(c)
        points.append(LoopPoint(pt, 0.5, 10, pred, 0.01, (0,), meas,
                                tuple(LoadRun(f"run{i}-{k}", k, 10, 10, {"ok": 10}, 5.0, 0.95) for k in range(2))))
    settings = LoopSettings("llama-cpp-gemma3-270m", ((512, 64),), (0.5,), 50.0, 0, repeats=2, threads=2, prompt_tokens=512,
                            decode_prompt_tokens=32, output_tokens=64, reps=3, stage_reps=(3,), loop_wall_s=600.0)
    return LoopReport("loop-cpu", {"gguf": "gemma.gguf", "architecture": "gemma3", "file_type": "Q4_K_M",
                                   "streamed_weight_bytes": 2**20, "streamed_weight_bytes_per_param": 0.9},
                      {"name": "llama.cpp", "flags": {"parallel": 4}}, settings, points=tuple(points), comparisons=tuple(comps),
                      capacity={"512/64": MixCapacity(0.2, 12.8)}, verdict=AbsoluteVerdict.of(comps),
                      repeatability=RepeatabilityVerdict.of(comps))


def test_the_page_shows_both_verdicts_the_intervals_and_the_repeats():
    r = _report()
    md = render_text(r)
    assert RUN_KINDS == ("loop-cpu", "loop-gpu")
    assert "3 of 4 judged figures within target" in md and "512/64 @ 0.2 req/s: ttft_p50_s +17.6% (target ±10%)" in md
    assert "Repeatability verdict" in md and "ratio" in md and ("MATCHES" in md) == r.repeatability.matches
    assert ("| 512/64 | 0.100/s | 0.50 | 10 | ttft_p50_s | 1050 ms | 1000 ms | +5.0% | ±10% ✓ | 760 ms – 1260 ms (wider than the "
            "target) | 950 ms, 1050 ms (10%) | 95% |") in md
    assert "| ±10% ✗ |" in md and "figures/" not in md  # the miss marked; the printed text has no figures


def test_the_html_page_embeds_its_figures():
    page = loop_page(_report(), figures=True)
    assert {f.name for f in page.figures} == {"predicted-vs-measured", "repeatability"}
    html = page.html()
    assert html.count("data:image/png;base64,") == 2 and "Served load" in html
    assert math.isfinite(_report().repeatability.ratio)
