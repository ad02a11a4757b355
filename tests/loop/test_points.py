"""The served points' step (harness.loop.points): each point measured as many times as the plan says for its rate."""

from __future__ import annotations

from dataclasses import replace

from harness.loop import points
from harness.loop.options import LoopOptions, plan_for
from harness.loop.predict import capacity_workload
from harness.loop.state import EngineTarget, LoopState, MeasuredPoint, PlannedPoint
from harness.served import ServedMeasurement, ServedPoint, ServedPrediction


def _planned(i: int, fraction: float, burst: bool = False) -> PlannedPoint:
    pt = ServedPoint(512, 64, rate_per_s=float("inf") if burst else 0.1 * (i + 1), workload="512/64", index=i)
    art = capacity_workload((512, 64), 10, 0)
    return PlannedPoint(pt, fraction, art, ServedPrediction(pt, "twin (test)"), 0.0)


def test_a_partly_repeated_plan_repeats_only_its_rates(monkeypatch):
    seen: dict[int, int] = {}

    def fake_measure_point(eng, p, out, *, repeats, **kw):
        seen[p.point.index] = repeats
        return MeasuredPoint((), ServedMeasurement(p.point, "test", requests_ok=1))

    monkeypatch.setattr(points, "measure_point", fake_measure_point)
    plan = replace(plan_for(LoopOptions(), 4), repeats=2, repeated_fractions=(0.5,))
    state = LoopState(plan, points=[_planned(0, 0.2), _planned(1, 0.5), _planned(2, 1.2), _planned(3, float("inf"), burst=True)])
    points.measure_all(state, EngineTarget("http://127.0.0.1:1", "m"), out=None, say=lambda s: None)
    assert seen == {0: 1, 1: 2, 2: 1, 3: 1}  # the 0.5 point twice; the others and the burst once
    state.plan, seen = replace(plan, repeated_fractions=None), {}
    points.measure_all(state, EngineTarget("http://127.0.0.1:1", "m"), out=None, say=lambda s: None)
    assert seen == {0: 2, 1: 2, 2: 2, 3: 2}  # every point and burst twice
