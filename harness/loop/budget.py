"""The loop's time budget: what is left of it after the first stage window, and what the rest is cut to so it fits.

A loop's wall time follows the engine's speed: the same `harness loop cpu` took 12 min on the second model and
18.7 min on Gemma on a host that ran Gemma 2.5× slower at batch 4 (2026-12-04 15:00: windows 379 s, points and
bursts ~700 s, the rest 49 s). So after the first stage window — when the twin has been corrected and the host's
speed is known — the rest of the loop is predicted phase by phase, in simulated time, and cut in a fixed order
until the prediction fits the budget:

1. the later stage windows, down to one after the last point (each point keeps a window before and after it);
2. the capacity bursts, down to the fewest requests that still keep every slot busy up to the 80th-percentile
   completion (N − ⌊0.8 N⌋ ≥ slots, N ≥ 10);
3. the served points' duration, down to `POINT_FLOOR_FRACTION` of the default.

Past the floors the loop runs anyway and says by how much it will be over. Every cut is a note in the report, and
the end of the loop compares the plan with the time it took. What the phases are predicted from:

- a later window: the first window's wall time × its reps ratio (`LoopOptions.window_reps`): the 15:00 run's later
  windows took 108 and 101 s against 170 s for the first at 2 reps against 3 (0.64, 0.60; predicted 0.67);
- a served point: the twin's last finish for the point's own workload (the load generator stops when every request
  has a record), at least its span, plus `POINT_OVERHEAD_S` (settling the slots, fitting prompts to the tokenizer,
  starting the load generator);
- a capacity burst: the twin's last finish for the burst, plus the same overhead;
- after the engine stops: `POST_RESERVE_S` (re-predicting every point per window and rebuilding the served steps:
  36 s on the 15:00 run).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

FULL_BUDGET_S, QUICK_BUDGET_S = 15 * 60.0, 3 * 60.0  # issue 15's targets: the full loop ≤ 15 min, --quick ≤ 3 min
POINT_OVERHEAD_S = 4.0  # settle_slots + tokenizer fit + the load generator's start, per point (3.5-5.7 s measured 2026-12-04 evening)
POST_RESERVE_S, QUICK_POST_RESERVE_S = 40.0, 10.0
POINT_FLOOR_FRACTION = 0.7  # a point is not cut below this × its default duration (its p50s hold too few requests)
SATURATION_QUANTILE = 0.8  # the capacity estimator's upper completion percentile (harness.target.saturation)


def min_saturating_burst(slots: int, floor: int = 10) -> int:
    """The fewest burst requests N ≥ floor with N − ⌊0.8 N⌋ ≥ slots: every slot still busy just before the 80th
    percentile completion, so the measured window is a true saturation (5 × slots always is; 4 × slots at 4 slots)."""
    n = max(floor, slots)
    while n - math.floor(SATURATION_QUANTILE * n + 1e-9) < slots:
        n += 1
    return n


@dataclass(frozen=True)
class Layout:
    """What the rest of the loop runs: later stage windows, requests per capacity burst, a served point's duration."""

    later_windows: int
    burst_requests: int
    point_duration_s: float


@dataclass(frozen=True)
class BudgetPlan:
    """The time budget's plan, made after the first stage window (seconds from the loop's start)."""

    budget_s: float
    elapsed_s: float  # when the plan was made
    default: Layout
    planned: Layout
    predicted_default_s: float  # the whole loop at the default layout
    predicted_s: float  # the whole loop as planned
    phases_s: dict[str, float] = field(default_factory=dict)  # the planned rest, by phase
    cuts: tuple[str, ...] = ()

    @property
    def over_s(self) -> float:
        return max(0.0, self.predicted_s - self.budget_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"over_s": self.over_s}

    def note(self) -> str:
        d, p = self.default, self.planned
        wins = f"{d.later_windows + 1} stage window{'s' if d.later_windows else ''}"
        bursts = f"capacity bursts of {d.burst_requests} requests" if d.burst_requests else "no capacity bursts"
        head = (f"time budget {self.budget_s / 60:.1f} min: the loop predicted {self.predicted_default_s / 60:.1f} min at its "
                f"defaults ({wins}, {bursts}, {d.point_duration_s:.0f}-s points)")
        if not self.cuts:
            over = (f"; {self.over_s / 60:.1f} min over, with nothing it may cut (each part the user set, or at its floor)" if self.over_s > 0
                    else ", within the budget; nothing cut")
            return head + over
        tail = f"; planned {self.predicted_s / 60:.1f} min after cutting " + "; ".join(self.cuts)
        if self.over_s > 0:
            tail += (f". Still {self.over_s / 60:.1f} min over at the floors (the engine is slow on this host): the loop runs "
                     "as planned and says how long it took")
        return head + tail


def plan_budget(*, budget_s: float, elapsed_s: float, default: Layout, slots: int, later_window_s: Callable[[int], float],
                point_s: Callable[[float], Sequence[float]], bursts_s: Callable[[int], float], post_s: float,
                floor_duration_s: float, fixed: frozenset[str] = frozenset()) -> BudgetPlan:
    """Cut the rest of the loop (`default`) in the module's order until its prediction fits `budget_s`.

    `later_window_s(k)`: seconds of the k-th later window (k = 1, 2, …); `point_s(d)`: each served point's predicted
    seconds at duration d; `bursts_s(n)`: all the capacity bursts' predicted seconds at n requests each. `fixed` names
    what the user set and is not cut: "windows", "bursts", "points"."""

    def total(lay: Layout) -> tuple[float, dict[str, float]]:
        ph = {"stage_windows_s": sum(later_window_s(k) for k in range(1, lay.later_windows + 1)),
              "served_points_s": float(sum(point_s(lay.point_duration_s))),
              "capacity_bursts_s": bursts_s(lay.burst_requests) if lay.burst_requests else 0.0,
              "after_engine_s": post_s}
        return elapsed_s + sum(ph.values()), ph

    t_default, ph = total(default)
    lay, t, cuts = default, t_default, []
    if t > budget_s and lay.later_windows > 1 and "windows" not in fixed:
        lay = Layout(1, lay.burst_requests, lay.point_duration_s)
        t, ph = total(lay)
        cuts.append(f"the stage windows to 2 (before the points and after the last; {default.later_windows + 1} by default)")
    n_min = min_saturating_burst(slots) if lay.burst_requests else 0
    if t > budget_s and lay.burst_requests > n_min and "bursts" not in fixed:
        lay = Layout(lay.later_windows, n_min, lay.point_duration_s)
        t, ph = total(lay)
        cuts.append(f"the capacity bursts to {n_min} requests ({default.burst_requests} by default; the fewest that keep "
                    f"all {slots} slots busy to the 80th-percentile completion)")
    if t > budget_s and lay.point_duration_s > floor_duration_s and "points" not in fixed:
        # the longest whole-second duration that fits, else the floor (total() grows with the duration)
        lo_d, hi_d = math.ceil(floor_duration_s), math.floor(lay.point_duration_s)
        d = next((x for x in range(hi_d, lo_d - 1, -1)
                  if total(Layout(lay.later_windows, lay.burst_requests, float(x)))[0] <= budget_s), lo_d)
        if d < lay.point_duration_s:
            lay = Layout(lay.later_windows, lay.burst_requests, float(d))
            t, ph = total(lay)
            cuts.append(f"the served points to {d:.0f} s ({default.point_duration_s:.0f} s by default, floor "
                        f"{floor_duration_s:.0f} s)")
    return BudgetPlan(budget_s, elapsed_s, default, lay, t_default, t, ph, tuple(cuts))
