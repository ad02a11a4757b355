"""The loop's time budget: what is left of it after the first stage window, and what the rest is cut to so it fits.

A loop's wall time follows the engine's speed: the same `harness loop cpu` took 12 min on the second model and
18.7 min on Gemma on a host that ran Gemma 2.5× slower at batch 4 (2026-12-04 15:00: windows 379 s, points and
bursts ~700 s, the rest 49 s). So after the first stage window — when the twin has been corrected and the host's
speed is known — the rest of the loop is predicted phase by phase, in simulated time, and cut in a fixed order
until the prediction fits the budget:

1. the later stage windows, down to one after the last point (each point keeps a window before and after it);
2. the capacity bursts, down to the fewest requests that still keep every slot busy up to the 80th-percentile
   completion (N − ⌊0.8 N⌋ ≥ slots, N ≥ 10);
3. the served points' duration, down to `POINT_FLOOR_FRACTION` of the default;
4. the served rates per mix, down to `min_rates` (`QUICK_MIN_RATES` with --quick; the full loop keeps the issue's 4),
   keeping the highest (the overloaded point, which gives the quick loop its capacity) and the rest evenly by rank;
   the points' duration is then set again, the longest that fits up to its default;
5. the repeats, first to the rates of `repeat_rates` only (k of each mix's rates measured `repeats` times, the rest
   and the bursts once; k from one fewer than the rates down to 1): the repeatability verdict then reads the engine's
   repeat-to-repeat difference on those points and the twin's error on every judged figure;
6. the repeats of each point and burst, down to one (the repeatability verdict then has nothing to read); the points'
   duration is set again.

Past the floors the loop runs anyway and says by how much it will be over. One cut comes last in this order but is
made first, before the first window (harness.loop.fit_budget.plan_windows): when the whole loop, window 1 predicted from
its own requests (`StageGroup`, `window_s_from_groups`) by the twin as calibrated, is over the budget even with the rest
at its floors, every window is made lean (one rep fewer of its prefill and decodes, one of its side measurements).
Every cut is a note in the report, and the end of the loop compares the plan with the time it took. What the phases
are predicted from:

- a later window: the first window part by part (`later_window_s`): its prefills and short decodes × the reps ratio
  (`LoopOptions.window_reps`), its long-context decodes × their own ratio (one fewer than the reps, at least one: 2 → 1
  at the defaults), the prompts at other lengths and beside decodes as they were (their reps do not change), the
  prompt-cache copy cases not at all (first window only). The whole first window × the reps ratio (0.67) over-estimated
  later windows by 15-25 s each on 2026-12-04 (they took 0.51-0.62 of the first);
- a served point: the twin's last finish for the point's own workload (the load generator stops when every request
  has a record), at least its span, plus `POINT_OVERHEAD_S` (settling the slots, fitting prompts to the tokenizer,
  starting the load generator);
- a capacity burst: the twin's last finish for the burst, plus the same overhead;
- after the engine stops: `POST_RESERVE_S` (re-predicting every point per window and rebuilding the served steps:
  36 s on the 15:00 run).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

FULL_BUDGET_S, QUICK_BUDGET_S = 15 * 60.0, 3 * 60.0  # issue 15's targets: the full loop ≤ 15 min, --quick ≤ 3 min
POINT_OVERHEAD_S = 4.0  # settle_slots + tokenizer fit + the load generator's start, per point (3.5-5.7 s measured 2026-12-04 evening)
POST_RESERVE_S, QUICK_POST_RESERVE_S = 40.0, 10.0
POINT_FLOOR_FRACTION = 0.7  # a point is not cut below this × its default duration (its p50s hold too few requests)
QUICK_MIN_RATES = 1  # --quick keeps at least the overloaded point per mix (two rates did not fit 3 min on a slow host: 3.1 min, 2026-12-04 21:48)
SATURATION_QUANTILE = 0.8  # the capacity estimator's upper completion percentile (harness.target.saturation)


def later_window_s(phases_s: dict[str, float], first_s: float, reps_first: int, reps_later: int) -> float:
    """Seconds of a later stage window predicted from the first window's parts (`phases_s`, measure_stage_window's
    `spent`): prefill and short decodes scale with the reps, long-context decodes with max(1, reps − 1), the side
    measurements stay, the copy cases go; time outside the named parts stays as it was. Without parts: the whole
    first window × the reps ratio."""
    r = reps_later / reps_first
    if not phases_s:
        return first_s * r
    long_r = max(1, reps_later - 1) / max(1, reps_first - 1)
    scaled = (phases_s.get("prefill_s", 0.0) + phases_s.get("decode_s", 0.0)) * r + phases_s.get("long_decode_s", 0.0) * long_r
    rest = max(0.0, first_s - sum(phases_s.values()))
    return scaled + phases_s.get("side_s", 0.0) + rest


# a stage request's time outside the twin's (HTTP, the CPU-share reads, waiting for idle slots): an allowance, not fitted
# (with it the 2026-12-05 07:37 Gemma window 1 was estimated at 202 s against 228 s measured)
STAGE_REQUEST_OVERHEAD_S = 0.05


@dataclass(frozen=True)
class StageGroup:
    """Requests a stage window sends together (prompt tokens, output tokens), and which one's finish ends the group
    (None: the last to finish; a mixed-prompt case ends with its prompt, its decodes are then stopped)."""

    requests: tuple[tuple[int, int], ...]
    ends_with: int | None = None


def window_s_from_groups(parts: dict[str, Sequence[StageGroup]], finish_s: Callable[[StageGroup], float],
                         per_request_s: float = STAGE_REQUEST_OVERHEAD_S) -> dict[str, float]:
    """Seconds of each part of a stage window, predicted before it runs: every group's finish in the twin
    (`finish_s`, from all its requests sent at once) plus `per_request_s` for each request; groups run one after
    another, as the window sends them."""
    return {part: sum(finish_s(g) + per_request_s * len(g.requests) for g in groups) for part, groups in parts.items()}


def keep_rates(rates: Sequence[float], k: int) -> tuple[float, ...]:
    """`k` of `rates` (sorted): the highest, and k − 1 of the rest evenly by rank (0.5 of 0.2, 0.5, 0.8 for k = 2)."""
    r = sorted(rates)
    if k >= len(r):
        return tuple(r)
    if k <= 1:
        return (r[-1],)
    rest = r[:-1]
    picks = sorted({min(len(rest) - 1, round((i + 0.5) * len(rest) / (k - 1) - 0.5 + 1e-9)) for i in range(k - 1)})
    return tuple(rest[i] for i in picks) + (r[-1],)


def repeats_of(repeats: int, repeated_fractions: tuple[float, ...] | None, fraction: float | None) -> int:
    """How many times a rate point at `fraction` of capacity (None: a capacity burst) is measured: `repeats` when every
    point is repeated (`repeated_fractions` None) or its rate is one of them, else once."""
    if repeated_fractions is None:
        return repeats
    return repeats if fraction is not None and fraction in repeated_fractions else 1


def repeat_rates(rates: Sequence[float], k: int) -> tuple[float, ...]:
    """The `k` of `rates` a partly repeated layout measures again: evenly by rank below the highest (the overloaded
    point's backlog makes it the dearest to repeat): 0.5 of 0.2, 0.5, 0.8, 1.2 for k = 1; 0.2 and 0.8 for k = 2."""
    r = sorted(rates)
    if k >= len(r):
        return tuple(r)
    return keep_rates(r, k + 1)[:-1] if len(r) > 1 else tuple(r)


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
    rate_fractions: tuple[float, ...] = ()  # the served rates per mix (fractions of the predicted capacity)
    repeats: int = 1  # each point's and burst's workload measured this many times back to back
    repeated_fractions: tuple[float, ...] | None = None  # None: every point and burst repeated; else only these rates'

    def repeats_of(self, fraction: float | None) -> int:
        return repeats_of(self.repeats, self.repeated_fractions, fraction)


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
        rates = f", {len(d.rate_fractions)} rates per mix" if d.rate_fractions else ""
        reps = f", each measured {d.repeats} times" if d.repeats > 1 else ""
        head = (f"time budget {self.budget_s / 60:.1f} min: the loop predicted {self.predicted_default_s / 60:.1f} min at its "
                f"defaults ({wins}, {bursts}, {d.point_duration_s:.0f}-s points{rates}{reps})")
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
                point_s: Callable[[float, tuple[float, ...], int], Sequence[float]], bursts_s: Callable[[int, int], float],
                post_s: float, floor_duration_s: float, fixed: frozenset[str] = frozenset(),
                min_rates: int | None = None) -> BudgetPlan:
    """Cut the rest of the loop (`default`) in the module's order until its prediction fits `budget_s`.

    `later_window_s(k)`: seconds of the k-th later window (k = 1, 2, …); `point_s(d, rates, repeats)`: each served
    point's predicted seconds at duration d with those rates per mix, each measured `repeats` times; `bursts_s(n,
    repeats)`: all the capacity bursts' predicted seconds at n requests each. `fixed` names what the user set and is not
    cut: "windows", "bursts", "points", "rates", "repeats";
    `min_rates` (None: all of the default's) is the fewest rates per mix the plan may keep."""

    def total(lay: Layout) -> tuple[float, dict[str, float]]:
        pts = (point_s(lay.point_duration_s, lay.rate_fractions, lay.repeats) if lay.repeated_fractions is None else
               [t for f in lay.rate_fractions for t in point_s(lay.point_duration_s, (f,), lay.repeats_of(f))])
        ph = {"stage_windows_s": sum(later_window_s(k) for k in range(1, lay.later_windows + 1)),
              "served_points_s": float(sum(pts)),
              "capacity_bursts_s": bursts_s(lay.burst_requests, lay.repeats_of(None)) if lay.burst_requests else 0.0,
              "after_engine_s": post_s}
        return elapsed_s + sum(ph.values()), ph

    t_default, ph = total(default)
    lay, t, cuts = default, t_default, []
    if t > budget_s and lay.later_windows > 1 and "windows" not in fixed:
        lay = replace(lay, later_windows=1)
        t, ph = total(lay)
        cuts.append(f"the stage windows to 2 (before the points and after the last; {default.later_windows + 1} by default)")
    n_min = min_saturating_burst(slots) if lay.burst_requests else 0
    if t > budget_s and lay.burst_requests > n_min and "bursts" not in fixed:
        lay = replace(lay, burst_requests=n_min)
        t, ph = total(lay)
        cuts.append(f"the capacity bursts to {n_min} requests ({default.burst_requests} by default; the fewest that keep "
                    f"all {slots} slots busy to the 80th-percentile completion)")

    def longest_fitting(lay: Layout) -> float:
        """The longest whole-second duration up to the default that fits, else the floor (total() grows with it)."""
        lo_d, hi_d = math.ceil(floor_duration_s), math.floor(default.point_duration_s)
        return float(next((x for x in range(hi_d, lo_d - 1, -1) if total(replace(lay, point_duration_s=float(x)))[0] <= budget_s), lo_d))

    def duration_cut() -> str:
        return (f"the served points to {lay.point_duration_s:.0f} s ({default.point_duration_s:.0f} s by default, floor "
                f"{floor_duration_s:.0f} s)")

    cut_duration = t > budget_s and lay.point_duration_s > floor_duration_s and "points" not in fixed
    if cut_duration:
        lay = replace(lay, point_duration_s=longest_fitting(lay))  # the duration is still the default here
        t, ph = total(lay)
    k_min = len(default.rate_fractions) if min_rates is None else max(1, min_rates)
    if t > budget_s and len(lay.rate_fractions) > k_min and "rates" not in fixed:
        k = next((k for k in range(len(lay.rate_fractions) - 1, k_min - 1, -1)
                  if total(replace(lay, rate_fractions=keep_rates(lay.rate_fractions, k)))[0] <= budget_s), k_min)
        lay = replace(lay, rate_fractions=keep_rates(lay.rate_fractions, k))
        if "points" not in fixed:  # fewer points leave room for longer ones again
            lay = replace(lay, point_duration_s=longest_fitting(lay))
        t, ph = total(lay)
        if lay.point_duration_s < default.point_duration_s:
            cuts.append(duration_cut())
        cuts.append(f"the served rates to {k} per mix ({', '.join(f'{f:g}' for f in lay.rate_fractions)} of the predicted "
                    f"capacity; {len(default.rate_fractions)} by default, floor {k_min})")
    elif cut_duration and lay.point_duration_s < default.point_duration_s:
        cuts.append(duration_cut())
    if t > budget_s and lay.repeats > 1 and "repeats" not in fixed and len(lay.rate_fractions) > 1:
        part = next((q for k in range(len(lay.rate_fractions) - 1, 0, -1)
                     if total(q := replace(lay, repeated_fractions=repeat_rates(lay.rate_fractions, k)))[0] <= budget_s), None)
        if part is not None:
            lay = part
            t, ph = total(lay)
            cuts.append(f"the repeats to the points at {', '.join(f'{f:g}' for f in lay.repeated_fractions or ())} of the "
                        f"predicted capacity ({lay.repeats} runs each; the other points and the bursts once; every point "
                        f"{default.repeats} times by default)")
    if t > budget_s and lay.repeats > 1 and "repeats" not in fixed:
        lay = replace(lay, repeats=1, repeated_fractions=None)
        if "points" not in fixed:  # one run a point leaves room for longer ones again
            lay = replace(lay, point_duration_s=longest_fitting(lay))
        t, ph = total(lay)
        cuts.append(f"the repeats to 1 ({default.repeats} by default: no repeatability verdict)"
                    + (f", the served points then {lay.point_duration_s:.0f} s" if lay.point_duration_s != default.point_duration_s else ""))
    return BudgetPlan(budget_s, elapsed_s, default, lay, t_default, t, ph, tuple(cuts))


@dataclass(frozen=True)
class WindowPlan:
    """The estimate made before the first stage window (harness.loop.fit_budget.plan_windows): window 1 and the whole
    loop predicted by the twin as calibrated, with full windows and, when that is over the budget, lean ones."""

    window1_full_s: float
    loop_full_s: float
    lean: bool
    window1_lean_s: float
    loop_lean_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
