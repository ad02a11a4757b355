"""The host's speed during a served point, fitted on that point's own requests: a diagnostic, never a prediction.

The twin that predicted a point is simulated again with every step time × s, and s is fitted so that the median, over
the point's completed requests, of log(measured E2E / the twin's E2E for the same request) is 0. E2E is the figure
fitted because it sums every step a request saw (prefill, decode, the waits), so one request's photo finish moves it
little; the judged figures (TTFT p50, TPOT p50) are then read from the twin at that s. A judged figure within target
at its point's own speed missed because of how fast the host ran during the point (and what the stage windows made
of that); one still outside missed for a reason no single speed fixes: prefill and decode drifting apart, a
scheduling cliff, or a wrong term of the twin. The fit uses the point's own measurements, so it is not held out: it
never enters the prediction or the verdict (docs/loop-cpu.md, "2026-12-02 early afternoon": over six stored loops,
window 1's twin at each point's own speed met 70 of 96 point figures, the loop's held-out prediction 37)."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any, Sequence

SPEED_SCALE_BOUNDS = (0.5, 2.0)  # the host's speed relative to the prediction's; a fit at a bound is reported as clamped
SPEED_FIT_TOL = 1e-3  # the fit stops when its bracket of log s is this narrow: s to ±0.05 %, far below the host's noise
SPEED_FIT_MAX_EVALS = 30  # simulations at most per fit (a bisection of the bounds' bracket to SPEED_FIT_TOL takes 13)


def step_scaled(twin: Any, factor: float) -> Any:
    """The twin with every iteration's time × `factor` (on top of any scale it already has; llama.cpp twins)."""
    return replace(twin, settings=replace(twin.settings, step_scale=twin.settings.step_scale * factor))


def _log_residual(twin: Any, requests: Sequence[Any], measured: Sequence[tuple[int, float]]) -> float:
    """Median over the measured requests of log(measured E2E / the twin's E2E of the same request)."""
    from harness.target.des import simulate  # noqa: PLC0415

    sim = simulate(twin.make_scheduler, requests)
    e2e = sim.finished_s - sim.arrival_s
    logs = [math.log(m / float(e2e[i])) for i, m in measured if 0 <= i < len(e2e) and m > 0 and e2e[i] > 0 and math.isfinite(e2e[i])]
    if not logs:
        raise ValueError("no measured request has a finite simulated E2E")
    return statistics.median(logs)


def fit_speed(twin: Any, requests: Sequence[Any], measured: Sequence[tuple[int, float]],
              bounds: tuple[float, float] = SPEED_SCALE_BOUNDS) -> tuple[float, bool] | None:
    """(s, clamped): the step-time factor at which the twin's E2E matches the measured E2E in the median (log ratio);
    `measured` holds (request index into `requests`, measured E2E seconds) of the completed requests, repeats pooled.
    Longer steps lengthen every E2E, so the residual falls as s grows, about as −log s: its value at s = 1 is the first
    guess of log s. A bracket of opposite signs is taken from s = 1 and that guess (or the bound beyond it, where the
    fit is clamped when the sign does not change), then narrowed by false position with the Illinois step (a
    non-monotone residual, from a request finishing either side of an arrival, still ends at a sign change). On the
    20 points of two stored Gemma loops (2026-12-03 11:18 and 13:41) this took 3-9 simulations a point where
    bisecting the bounds' bracket took 18 (1.9-5.5x less time) and gave the same factors within 0.03 %, one 0.29 %
    apart at another sign change (the 13:41 loop's host-speed diagnostic had taken 22 s). None without usable
    requests."""
    if not measured:
        return None
    lo_b, hi_b = (math.log(b) for b in bounds)

    seen: dict[float, float] = {}  # log s -> residual: each is one simulation, and their count bounds the fit

    def res(x: float) -> float:
        if x not in seen:
            seen[x] = _log_residual(step_scaled(twin, math.exp(x)), requests, measured)
        return seen[x]

    try:
        x0 = min(max(0.0, lo_b), hi_b)
        r0 = res(x0)
        if r0 == 0:
            return math.exp(x0), False
        up = r0 > 0  # the engine was slower than the twin at x0: the root lies above
        bound = hi_b if up else lo_b
        x1 = min(max(x0 + r0, lo_b), hi_b)
        r1 = res(x1)
        if (r1 > 0) == up and r1 != 0 and x1 != bound:  # the guess fell short: the bound beyond it
            x0, r0, x1 = x1, r1, bound
            r1 = res(x1)
        if r1 == 0:
            return math.exp(x1), False
        if (r1 > 0) == up:  # no sign change up to the bound
            return math.exp(bound), True
        # a: residual > 0 (twin too fast), b: residual <= 0
        (a, ra), (b, rb) = ((x0, r0), (x1, r1)) if up else ((x1, r1), (x0, r0))
        side = 0
        while abs(b - a) > SPEED_FIT_TOL and rb != 0 and len(seen) < SPEED_FIT_MAX_EVALS:
            x = (a * rb - b * ra) / (rb - ra)
            if not min(a, b) < x < max(a, b):
                x = (a + b) / 2
            rx = res(x)
            if rx > 0:
                if side == 1:
                    rb /= 2
                a, ra, side = x, rx, 1
            else:
                if side == -1:
                    ra /= 2
                b, rb, side = x, rx, -1
            if abs(rx) < 1e-6:
                return math.exp(x), False
    except ValueError:
        return None
    return math.exp(b if rb == 0 else (a + b) / 2), False
