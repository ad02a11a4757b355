"""The loop's compare step: each isolated stage against the roofline (which term is wrong, by how much), and each
served point's prediction against its measurement through the one comparison (harness.served.compare_served), judged
by the loop's rules; then the two verdicts (harness.loop_records.verdict)."""

from __future__ import annotations

import math
from typing import Sequence

from harness.loop.state import MeasuredPoint, PlannedPoint
from harness.loop_records.report import LoadRun
from harness.loop_records.stages import CONTENDED_SHARE, StageComparison, StageMeasurement, StagePrediction
from harness.loop_records.verdict import AbsoluteVerdict, RepeatabilityVerdict
from harness.served import ServedComparison, compare_served, relative_error

# the targets on held-out, uncontended points (a fraction of the measured figure): capacity within 5 %, TTFT p50 and
# TPOT p50 within 10 %
TARGETS = {"capacity_requests_per_s": 0.05, "ttft_p50_s": 0.10, "tpot_p50_s": 0.10}
SERVED_METRICS = ("request_throughput_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "e2e_p50_s")
SATURATED_FRACTION = 0.97  # a point served below this × its offered rate was saturated: its completion rate is a capacity


def _is_time(q: str) -> bool:
    """A duration (ttft_s), not a rate (prefill_tokens_per_s)."""
    return q.endswith("_s") and not q.endswith("_per_s")


def term_verdict(p: StagePrediction, measured: float) -> str:
    """Which roofline term is wrong and by how much, stated from the measurement."""
    if _is_time(p.quantity):
        actual_s = measured
    else:
        units = p.value * max(p.compute_s, p.memory_s)  # tokens in the unit of work
        actual_s = units / measured
    term_s = p.compute_s if p.bound == "compute" else p.memory_s
    other_s = p.memory_s if p.bound == "compute" else p.compute_s
    ratio = actual_s / term_s if term_s > 0 else math.inf
    if abs(ratio - 1) <= 0.2:
        return f"within 20%: the {p.bound} term ({term_s * 1e3:.3g} ms) explains the measured {actual_s * 1e3:.3g} ms"
    if ratio > 1:
        implied = (p.flops if p.bound == "compute" else p.bytes) / actual_s
        unit = "GFLOP/s" if p.bound == "compute" else "GB/s"
        return (f"the {p.bound} term is {ratio:.2f}× too small ({term_s * 1e3:.3g} ms predicted, {actual_s * 1e3:.3g} ms "
                f"measured): the engine reaches {implied / 1e9:.3g} {unit} on this work, not the calibrated "
                f"{(p.flops if p.bound == 'compute' else p.bytes) / term_s / 1e9:.3g}; the other term is {other_s * 1e3:.3g} ms")
    return (f"the engine is {1 / ratio:.2f}× faster than the {p.bound} term ({term_s * 1e3:.3g} ms predicted, "
            f"{actual_s * 1e3:.3g} ms measured): the calibrated constant understates what the engine's kernels reach")


def compare_stages(predicted: Sequence[StagePrediction], measured: Sequence[StageMeasurement]) -> list[StageComparison]:
    by_q = {m.quantity: m for m in measured}
    out = []
    for p in predicted:
        m = by_q.get(p.quantity)
        if m is None:
            continue
        contended = m.engine_cpu_share is not None and m.engine_cpu_share < CONTENDED_SHARE
        v = term_verdict(p, m.value)
        if contended:
            v = (f"CONTENDED: the engine got {m.engine_cpu_share:.0%} of its cores while measured (other processes ran); "
                 f"the number reflects that, rerun on an idle host. {v}")
        out.append(StageComparison(p.quantity, p.value, m.value, m.client_value, relative_error(p.value, m.value) or 0.0,
                                   p.bound, p.compute_s, p.memory_s, v, m.engine_cpu_share, contended))
    return out


def compare_point(p: PlannedPoint, m: MeasuredPoint, *, capacity_here: bool = False, held_out: bool = True) -> ServedComparison:
    """One point's comparison by the loop's rules. A rate point shows SERVED_METRICS (TTFT and TPOT p50 judged); with
    `capacity_here` (the mix's most overloaded point, when the mix had no burst) also the capacity, judged only when the
    engine was saturated there (served < SATURATED_FRACTION of the offered rate; else its completion rate is a lower
    bound). A burst shows the capacity, judged when every request of every repeat completed. Nothing is judged at a
    contended point (the engine got < CONTENDED_SHARE of its cores), one cut at its drain limit, or one not held out."""
    runs = [r.run for r in m.runs]
    share = min((r.engine_cpu_share for r in runs if r.engine_cpu_share is not None), default=None)
    cut = sum(int(r.errors_by_class.get("cancelled", 0)) for r in runs)
    meas = m.measurement
    why = ""
    if any(r.contended for r in runs):
        why = f"contended: the engine got {share:.0%} of its cores while it had work"
    elif cut:
        why = (f"{cut} requests were still running at the drain limit (--quick) and were cancelled: the measured figures "
               "cover the completed ones only")
    elif not held_out:
        why = "not held out"
    if p.burst:
        sent = p.artifact.count * len(runs)
        note = (f"measured: output tokens/s between the 20th and 80th percentile completion of {p.artifact.count} requests "
                "sent at once, over the mean output (the twin predicts the same statistic for the same requests)")
        skip = {} if meas.requests_ok >= sent else {
            "capacity_requests_per_s": f"only {meas.requests_ok} of {sent} completed ({_errors(runs)})"}
        return compare_served(p.prediction, meas, targets=TARGETS, metrics=["capacity_requests_per_s"], not_judged=why,
                              not_judged_metrics=skip, notes={"capacity_requests_per_s": note})
    metrics = list(SERVED_METRICS) + (["capacity_requests_per_s"] if capacity_here else [])
    skip, notes = {}, {}
    if capacity_here:
        rate = float(p.point.rate_per_s or 0.0)
        served = meas.request_throughput_per_s or 0.0
        if served < SATURATED_FRACTION * rate:
            notes["capacity_requests_per_s"] = ("measured: output tokens/s between the 20th and 80th percentile completion at "
                                                "this overloaded point, over the mean output")
        else:
            skip["capacity_requests_per_s"] = (f"not saturated at {rate:.3g} req/s (served {served:.3g}/s): the measured "
                                               "figure is a lower bound on capacity")
    return compare_served(p.prediction, meas, targets=TARGETS, metrics=metrics, not_judged=why, not_judged_metrics=skip,
                          notes=notes)


def _errors(runs: Sequence[LoadRun]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in runs:
        for k, n in r.errors_by_class.items():
            out[k] = out.get(k, 0) + int(n)
    return out


def compare_points(points: Sequence[PlannedPoint], measured: dict[int, MeasuredPoint]) -> list[ServedComparison]:
    """Every measured point's comparison; the capacity is read at a mix's most overloaded rate point (≥ 1 × capacity)
    when the mix had no burst."""
    bursts = {p.point.workload for p in points if p.burst}
    tops: dict[str, PlannedPoint] = {}
    for p in points:
        if not p.burst and (p.point.workload not in tops or p.fraction > tops[p.point.workload].fraction):
            tops[p.point.workload] = p
    out = []
    for p in points:
        m = measured.get(p.point.index)
        if m is None:
            continue
        top = not p.burst and p.point.workload not in bursts and tops[p.point.workload] is p and p.fraction >= 1.0
        out.append(compare_point(p, m, capacity_here=top))
    return out


def verdicts(comparisons: Sequence[ServedComparison], measured: dict[int, MeasuredPoint],
             seed: int = 0) -> tuple[AbsoluteVerdict, RepeatabilityVerdict | None]:
    contended = sum(1 for m in measured.values() if any(r.run.contended for r in m.runs))
    return AbsoluteVerdict.of(comparisons, contended), RepeatabilityVerdict.of(comparisons, seed=seed)


__all__ = ["SERVED_METRICS", "TARGETS", "compare_point", "compare_points", "compare_stages", "term_verdict", "verdicts"]
