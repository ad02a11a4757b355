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
SPEED_FIT_STEPS = 16  # bisection steps in log s: the bracket of 4x narrows to 4^(1/2^16), far below the host's noise


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
    Longer steps lengthen every E2E, so the residual falls as s grows; bisection keeps a bracket of opposite signs
    (a non-monotone residual, from a request finishing either side of an arrival, still ends at a sign change).
    None without usable requests."""
    if not measured:
        return None
    lo, hi = (math.log(b) for b in bounds)
    try:
        r_lo = _log_residual(step_scaled(twin, math.exp(lo)), requests, measured)
        if r_lo <= 0:  # even the fastest twin is slower than the engine was
            return math.exp(lo), True
        if _log_residual(step_scaled(twin, math.exp(hi)), requests, measured) >= 0:  # even the slowest is faster
            return math.exp(hi), True
        for _ in range(SPEED_FIT_STEPS):
            mid = (lo + hi) / 2
            if _log_residual(step_scaled(twin, math.exp(mid)), requests, measured) > 0:
                lo = mid
            else:
                hi = mid
    except ValueError:
        return None
    return math.exp((lo + hi) / 2), False
