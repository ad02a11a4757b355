"""The loop's time-budget steps (harness.loop.budget plans; these predict the loop with the twin and apply the plan):
before the first stage window, whether the windows must be lean (`plan_windows`); after it, what the rest is cut to
(`fit_rest`). Every duration here is the twin's, in simulated time; nothing is measured."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from harness.loop.budget import (POINT_FLOOR_FRACTION, POINT_OVERHEAD_S, POST_RESERVE_S, QUICK_MIN_RATES, QUICK_POST_RESERVE_S,
                                 BudgetPlan, Layout, StageGroup, WindowPlan, later_window_s, plan_budget, window_s_from_groups)
from harness.loop.options import LoopOptions, LoopPlan
from harness.loop.output import LoopOutput
from harness.loop.predict import capacity_workload, plan_points
from harness.loop.stages import stage_window_groups
from harness.loop.state import LoopState
from harness.target.des import ArrivingRequest, simulate
from harness.target.twin import TwinSpec, requests_from_rows
from workloads.artifact import WorkloadArtifact

QUICK_DRAIN_FACTOR = 1.0  # --quick: a point's drain is cut this many point durations after its last intended send
QUICK_DRAIN_MARGIN = 1.5  # --quick: or the twin's predicted drain × this, when longer (the host's speed moves ×0.7 … ×1.3)


def twin_finish_s(twin: TwinSpec, requests: Sequence[ArrivingRequest], only: int | None = None) -> float:
    """The twin's last finish of `requests` (of request `only` alone when given), 0 when none finishes."""
    done = simulate(twin.make_scheduler, list(requests)).finished_s
    done = done[[only]] if only is not None else done
    done = done[np.isfinite(done)]
    return float(done.max()) if done.size else 0.0


def last_finish_s(twin: TwinSpec, art: WorkloadArtifact) -> float:
    """The twin's last finish (s from the first intended send) for a workload artifact, at least its span."""
    return max(float(art.span_s), twin_finish_s(twin, requests_from_rows(art.rows)))


def quick_drain_limit_s(twin: TwinSpec, art: WorkloadArtifact, duration_s: float) -> float:
    """--quick: how long a point may drain after its schedule's span: `QUICK_DRAIN_FACTOR` point durations, or the
    twin's predicted drain (its last finish past the span) × `QUICK_DRAIN_MARGIN` when that is longer (a fixed limit
    alone cancelled every request where one 512/64 request outlasts 8 s, and nothing was judged)."""
    return max(QUICK_DRAIN_FACTOR * duration_s, QUICK_DRAIN_MARGIN * max(0.0, last_finish_s(twin, art) - float(art.span_s)))


def _group_finish_s(twin: TwinSpec, g: StageGroup) -> float:
    """The twin's finish of a stage window's group, every request sent at once."""
    return twin_finish_s(twin, [ArrivingRequest(0.0, int(p), int(o)) for p, o in g.requests], g.ends_with)


class _Rest:
    """What the rest of the loop is predicted from, by the twin: each planned rate point's (fraction, last finish) and
    the capacity bursts' seconds by burst size (cached)."""

    def __init__(self, state: LoopState, plan: LoopPlan, twin: TwinSpec):
        self.finishes = [(p.fraction, last_finish_s(twin, p.artifact)) for p in state.points if not p.burst]
        self._bursts: dict[int, float] = {}
        self.twin, self.mixes, self.seed = twin, plan.mixes, plan.seed

    def bursts_s(self, n: int, repeats: int) -> float:
        if n not in self._bursts:
            self._bursts[n] = sum(last_finish_s(self.twin, capacity_workload(m, n, self.seed)) + POINT_OVERHEAD_S for m in self.mixes)
        return repeats * self._bursts[n]


def _plan_rest(plan: LoopPlan, opts: LoopOptions, slots: int, elapsed_s: float, w0_phases_s: dict[str, float], w0_s: float,
               rest: _Rest, has_window: bool = True) -> BudgetPlan:
    """harness.loop.budget.plan_budget for the loop after its first stage window (`elapsed_s`: when that window ends;
    `w0_phases_s` / `w0_s`: its parts and seconds, measured or predicted; `has_window`: False without stage windows)."""
    D = plan.point_duration_s

    def point_s(d: float, rates: tuple[float, ...], repeats: int) -> list[float]:
        out = []
        for f, lf in rest.finishes:  # an overloaded point's backlog grows with its length; an underloaded one drains alike
            if f not in rates:
                continue
            t = lf * d / D if f >= 1 else d + (lf - D)
            out.append(repeats * (max(t, 0.0) + POINT_OVERHEAD_S))
        return out

    def later_s(k: int) -> float:
        return later_window_s(w0_phases_s, w0_s, plan.window_reps(0), plan.window_reps(k)) if has_window else 0.0

    default = Layout(max(0, plan.n_windows - 1) if has_window else 0, plan.capacity_requests, D, tuple(plan.rate_fractions),
                     plan.repeats)
    return plan_budget(budget_s=float(opts.budget_s or math.inf), elapsed_s=elapsed_s, default=default, slots=slots,
                       later_window_s=later_s, point_s=point_s, bursts_s=rest.bursts_s,
                       post_s=QUICK_POST_RESERVE_S if plan.quick else POST_RESERVE_S,
                       floor_duration_s=POINT_FLOOR_FRACTION * D, fixed=opts.user_set,
                       min_rates=QUICK_MIN_RATES if plan.quick else None)


def plan_windows(state: LoopState, opts: LoopOptions, twin: TwinSpec, slots: int, prompt_cache_ram: bool, elapsed_s: float,
                 say: Callable[[str], None]) -> None:
    """Before the first stage window (the last cut, made first): the whole loop predicted by the twin as calibrated —
    window 1 from its requests (`stage_window_groups`), the rest as `fit_rest` will plan it; when that is over the
    budget even at the rest's floors, every window is made lean (LoopPlan.lean_windows). The full loop only, at 3 reps
    or more; the estimate goes into state.window_plan and a note."""
    plan = state.plan
    if not (plan.served and plan.stages) or opts.budget_s is None or plan.quick or plan.reps < 3 or plan.lean_windows:
        return
    group_s = functools.cache(lambda g: _group_finish_s(twin, g))  # a window repeats its groups; lean and full share them
    rest = _Rest(state, plan, twin)

    def predict(p: LoopPlan) -> tuple[float, BudgetPlan]:
        parts = window_s_from_groups(stage_window_groups(p, slots, 0, prompt_cache_ram), group_s)
        w0 = sum(parts.values())
        return w0, _plan_rest(p, opts, slots, elapsed_s + w0, parts, w0, rest)

    w_full, full = predict(plan)
    if full.over_s > 0:
        lean_plan = replace(plan, lean_windows=True)
        w_lean, lean = predict(lean_plan)
        state.plan = lean_plan
        note = (f"time budget, before the first stage window: the twin as calibrated predicted window 1 at {w_full:.0f} s and the "
                f"loop at {full.predicted_s / 60:.1f} min even after cutting the rest to its floors, over the "
                f"{full.budget_s / 60:.1f} min; so every stage window is lean (prefill and decodes at {lean_plan.window_reps(0)} reps, "
                f"{plan.window_reps(0)} in window 1 by default; the side measurements and prompt-cache copy cases at 1 rep): "
                f"window 1 predicted at {w_lean:.0f} s, the loop at {lean.predicted_s / 60:.1f} min")
    else:
        w_lean, lean = w_full, full
        note = (f"time budget, before the first stage window: the twin as calibrated predicted window 1 at {w_full:.0f} s and the "
                f"loop at {full.predicted_s / 60:.1f} min as the rest would be planned, within the {full.budget_s / 60:.1f} min; "
                "the stage windows keep their reps")
    state.window_plan = WindowPlan(w_full, full.predicted_s, state.plan.lean_windows, w_lean, lean.predicted_s)
    state.note(note, say)


def fit_rest(state: LoopState, opts: LoopOptions, twin: TwinSpec, slots: int, elapsed_s: float, out: LoopOutput,
             say: Callable[[str], None]) -> None:
    """After the first stage window, plan the rest of the loop to the budget: state.plan takes the cut layout; when the
    bursts, the points' duration or the rates change, the points are set and predicted anew (still from the corrected
    twin alone). The plan goes into state.budget and the notes."""
    plan = state.plan
    w0 = state.windows[0] if state.windows else None
    budget = _plan_rest(plan, opts, slots, elapsed_s, w0.phases_s if w0 else {}, w0.duration_s if w0 else 0.0,
                        _Rest(state, plan, twin), has_window=w0 is not None)
    state.budget = budget
    state.note(budget.note(), say)
    lay, default = budget.planned, budget.default
    if lay == default:
        return
    state.plan = replace(plan, stage_windows=lay.later_windows + 1 if state.windows else plan.stage_windows,
                         capacity_requests=lay.burst_requests, point_duration_s=lay.point_duration_s,
                         rate_fractions=lay.rate_fractions, repeats=lay.repeats, repeated_fractions=lay.repeated_fractions)
    if (lay.burst_requests, lay.point_duration_s, lay.rate_fractions) != (default.burst_requests, default.point_duration_s,
                                                                          default.rate_fractions):
        state.capacity, state.points = plan_points(twin, state.plan.mixes, state.plan.rate_fractions, state.plan.point_duration_s,
                                                   state.plan.seed, state.plan.capacity_requests)
        out.predictions(state.points, revision=2)


__all__ = ["fit_rest", "last_finish_s", "plan_windows", "quick_drain_limit_s", "twin_finish_s"]
