"""Stage windows: the isolated stages measured more than once over a loop, so that the served points are predicted from
the host's speed over the whole loop rather than from the one minute before them.

Why: on a shared 2-core VM the engine's speed moves 20-40 % within minutes (docs/loop-cpu.md), and every correction
the twin takes from the stages inherits the speed of the minute it was measured in.

How: window 0 is the stage measurement before the served points (it sets the rates: they are fractions of the capacity
the twin predicts from it). Windows 1 … N−1 repeat the same isolated requests between the served points, evenly by
count, the last one after the last point (`window_points`). Each window corrects the base twin on its own
(harness.target.corrections.corrected_twin), and every measured point is predicted again, once the engine has stopped,
from the median of all windows' corrections, correction by correction (harness.target.corrections.combine). These
predictions stay held out: stage requests only, never a served measurement. The verdict with window 1 alone (how the
points were planned) is kept beside it as one line.

Points are measured in the order of their ids (the rate points, mix by mix, then the capacity bursts).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Sequence

from harness.loop.compare import compare_points
from harness.loop.output import LoopOutput
from harness.loop.predict import burst_capacity, predict, served_prediction, twin_source
from harness.loop.state import LoopState
from harness.loop_records.verdict import AbsoluteVerdict
from harness.target.corrections import combine, corrected_twin, correction_summary
from harness.target.stage_requests import StageShape, window_checks
from harness.target.twin import TwinSpec, twin_dict


def window_points(point_ids: Sequence[int], n_windows: int) -> tuple[int, ...]:
    """The served points after which windows 1 … n_windows − 1 are measured: evenly by count, the last after the last
    point (so every point has a window after it). Empty for one window or no points."""
    if n_windows < 2 or not point_ids:
        return ()
    ids = sorted(point_ids)
    n, k = len(ids), n_windows - 1
    return tuple(sorted({ids[max(0, math.ceil(j * n / k) - 1)] for j in range(1, k + 1)}))


def windowed_predictions(state: LoopState, shape: StageShape, duration_s: float, out: LoopOutput,
                         say: Callable[[str], None]) -> None:
    """Each measured point (and capacity burst) predicted anew from the median of every stage window's corrections:
    state.points, state.capacity and state.point_twins then hold those predictions; state.first_window_verdict the
    verdict of the predictions made with window 1 alone (how the points were planned)."""
    base, wins = state.base_twin, state.windows
    if base is None or state.twin is None or len(wins) < 2:
        return
    singles = [state.twin] + [corrected_twin(base, window_checks(state.checks, w.index), shape)[0] for w in wins[1:]]
    every = tuple(w.index for w in wins)
    label = "stage windows " + " + ".join(str(i + 1) for i in every)
    twin: TwinSpec = combine(singles, label)
    first = list(state.points)
    state.first_window_verdict = AbsoluteVerdict.of(compare_points(first, state.measured))
    caps = dict(state.capacity)
    new = []
    for p in first:
        if p.point.index not in state.measured:
            new.append(p)
        elif p.burst:
            caps[p.point.workload] = burst_capacity(twin, p.artifact, every)
            new.append(replace(p, prediction=served_prediction(p.point, None, caps[p.point.workload].requests_per_s,
                                                               twin_source(twin)), windows=every))
        else:
            new.append(predict(twin, p, duration_s, windows=every))
    state.points = [q if q.burst else replace(q, prediction=replace(q.prediction, capacity_requests_per_s=caps[q.point.workload].requests_per_s))
                    for q in new]
    state.capacity = caps
    state.point_twins = {p.point.index: twin for p in state.points if p.point.index in state.measured}
    v = AbsoluteVerdict.of(compare_points(state.points, state.measured))
    state.note(f"stage windows: {len(wins)} measurements of the isolated stages over the loop. Each window corrects the twin on "
               f"its own; every measured point is predicted again, after the points ran, from the median of all windows' "
               f"corrections (stage requests only: the points stay held out; the rates stay the fractions of window 1's "
               f"capacity they were set from). Verdict with every window: {v.within} of {v.judged} within target; with "
               f"window 1 alone (how the points were planned): {state.first_window_verdict.within} of "
               f"{state.first_window_verdict.judged}", say)
    state.note(f"stage corrections every point was predicted with, the median over windows {'+'.join(str(i + 1) for i in every)} "
               f"(each window's own in brackets, in order): {correction_summary(twin, singles)}", say)
    state.twin = twin
    out.json("twin-windows.json", {"+".join(str(i + 1) for i in every): twin_dict(twin),
                                   **{str(i + 1): twin_dict(t) for i, t in zip(every, singles)}})
    out.twin(twin)  # twin.json: the twin that made the prediction compared (bench-pd --calibration reads it)
    out.predictions([p for p in state.points if p.point.index in state.measured], revision=4, window_mode="all")


__all__ = ["window_points", "windowed_predictions"]
