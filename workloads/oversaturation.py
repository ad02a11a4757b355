"""The over-saturation rule: when to cut a rate step short because the target cannot keep up with the offered rate.

Rule (evaluated once a second by the load process, on what it has seen so far; pure, so it is replayable from a
stored run with `judge_run`):
  Over the last `window_s` seconds (default 30) of the run, and only once `min_elapsed_s` (default 20) have passed
  since t0, fit two least-squares lines:
    A  the number of requests in flight (sent − ended), sampled once a second, against time;
    B  each request's TTFT from its intended send, against the time its first token arrived.
  With b the slope, se its standard error and t the one-sided 95 % Student quantile for n − 2 degrees of freedom,
  the lower confidence bound is b − t·se. The step is OVER-SATURATED when both lower bounds lie above their
  thresholds:
    A  in-flight growth > `min_growth_frac` (default 0.1) × the offered rate (requests pile up at ≥ 10 % of the
       arrival rate: a server running below its capacity has a flat in-flight count, whatever its latency), and
    B  TTFT growth > `min_ttft_growth` (default 0.05 s per s: queueing delay growing by ≥ 50 ms each second);
  each with at least `min_points` (default 8) points in the window.
Tuned on a simulated FIFO server with exponential service times (tests/workloads/test_oversaturation.py, 20 seeds,
90 s): at 83 % load no step is cut, at 92 % one or two in twenty; at 109 % and above nearly every one, 20–30 s in.
Why two signals: during a startup backlog the in-flight count grows while nothing is served (no TTFT yet), and
during its drain TTFT falls; only an arrival rate above the service rate grows both for a whole window. A client
that cannot send on time (its concurrency cap reached) shows as a growing TTFT from the intended send with a flat
in-flight count; that run is invalid on its own rule (schedule lag) and is not cut by this one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# one-sided 95 % Student t quantiles, df = 1 .. 30 (standard tables); beyond 30 the Cornish-Fisher expansion below
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753, 1.746,
        1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)
_Z95 = 1.6448536269514722


def t95(df: int) -> float:
    """One-sided 95 % quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        return math.inf
    if df <= len(_T95):
        return _T95[df - 1]
    z = _Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class OversaturationRule:
    window_s: float = 30.0
    min_elapsed_s: float = 20.0
    min_growth_frac: float = 0.1  # of the offered rate, requests/s per s
    min_ttft_growth: float = 0.05  # s per s
    min_points: int = 8

    def __post_init__(self) -> None:
        for name in ("window_s", "min_elapsed_s", "min_growth_frac", "min_ttft_growth"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
                raise ValueError(f"over-saturation rule {name} must be a number >= 0, got {v!r}")
        if isinstance(self.min_points, bool) or not isinstance(self.min_points, int) or self.min_points < 3:
            raise ValueError(f"over-saturation rule min_points must be an integer >= 3, got {self.min_points!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Slope:
    slope: float  # per second
    lower_95: float  # one-sided 95 % lower confidence bound
    points: int


@dataclass(frozen=True)
class Verdict:
    oversaturated: bool
    t_s: float  # when it was judged (seconds since t0)
    in_flight: Slope | None
    ttft: Slope | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_slope(x: Any, y: Any) -> Slope | None:
    """Least-squares slope of y on x with its one-sided 95 % lower bound; None with fewer than 3 points or no spread."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = int(x.size)
    if n < 3:
        return None
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    if sxx <= 0:
        return None
    b = float(((x - xm) * (y - ym)).sum() / sxx)
    resid = y - (ym + b * (x - xm))
    se = math.sqrt(max(float((resid**2).sum()), 0.0) / (n - 2) / sxx)
    return Slope(b, b - t95(n - 2) * se, n)


def judge(now_s: float, in_flight_t: Any, in_flight: Any, ttft_t: Any, ttft_s: Any, *, rate_per_s: float | None,
          rule: OversaturationRule = OversaturationRule()) -> Verdict:
    """Apply the rule at `now_s` (seconds since t0) to the in-flight samples and the per-request TTFT points seen so far."""
    if now_s < rule.min_elapsed_s:
        return Verdict(False, now_s, None, None, f"not judged before {rule.min_elapsed_s:g} s")
    lo = now_s - rule.window_s
    ft, fv = np.asarray(in_flight_t, dtype=float), np.asarray(in_flight, dtype=float)
    tt, tv = np.asarray(ttft_t, dtype=float), np.asarray(ttft_s, dtype=float)
    a = fit_slope(ft[(ft >= lo) & (ft <= now_s)], fv[(ft >= lo) & (ft <= now_s)])
    b = fit_slope(tt[(tt >= lo) & (tt <= now_s)], tv[(tt >= lo) & (tt <= now_s)])
    g_a = rule.min_growth_frac * (rate_per_s or 1.0)
    if a is None or b is None or a.points < rule.min_points or b.points < rule.min_points:
        return Verdict(False, now_s, a, b, f"fewer than {rule.min_points} points in the last {rule.window_s:g} s")
    hot_a, hot_b = a.lower_95 > g_a, b.lower_95 > rule.min_ttft_growth
    reason = (f"in flight grew {a.slope:.3g} req/s (95 % lower bound {a.lower_95:.3g} vs {g_a:.3g}) and TTFT from the intended "
              f"send grew {b.slope:.3g} s/s (lower bound {b.lower_95:.3g} vs {rule.min_ttft_growth:g}) over the last "
              f"{rule.window_s:g} s")
    return Verdict(hot_a and hot_b, now_s, a, b, reason)


def judge_run(requests: Any, *, rate_per_s: float | None, rule: OversaturationRule = OversaturationRule(),
              step_s: float = 1.0) -> Verdict | None:
    """Replay the rule on a stored requests table (pandas: sent_ns, e2e_s, first_token_ns, ttft_from_intended_s) once a
    second, as the load process applied it; the first verdict that fires, else None."""
    sent = requests["sent_ns"].to_numpy(dtype=float) / 1e9
    ended = sent + requests["e2e_s"].to_numpy(dtype=float)
    first = requests["first_token_ns"].to_numpy(dtype=float) / 1e9
    ttft = requests["ttft_from_intended_s"].to_numpy(dtype=float)
    end = float(np.nanmax(ended)) if np.isfinite(ended).any() else 0.0
    grid = np.arange(step_s, end + step_s, step_s)
    s_sorted, e_sorted = np.sort(sent[np.isfinite(sent)]), np.sort(ended[np.isfinite(ended)])
    flight = np.searchsorted(s_sorted, grid, "right") - np.searchsorted(e_sorted, grid, "right")
    for k, now in enumerate(grid):
        seen = first <= now
        v = judge(float(now), grid[:k + 1], flight[:k + 1], first[seen], ttft[seen], rate_per_s=rate_per_s, rule=rule)
        if v.oversaturated:
            return v
    return None


class LiveJudge:
    """The rule applied while a run goes on: the load process feeds it each request's first token and, once a second,
    the in-flight count; points older than the window are dropped, so each tick costs the window's points only."""

    def __init__(self, rate_per_s: float | None, rule: OversaturationRule = OversaturationRule()):
        self.rule = rule
        self.rate_per_s = rate_per_s
        self.flight: deque[tuple[float, float]] = deque()
        self.ttft: deque[tuple[float, float]] = deque()
        self.verdict: Verdict | None = None

    def add_ttft(self, first_token_s: float, ttft_from_intended_s: float) -> None:
        self.ttft.append((first_token_s, ttft_from_intended_s))

    def tick(self, now_s: float, in_flight: int) -> Verdict | None:
        """The verdict that fires at `now_s` (seconds since t0), else None; once fired it stays."""
        if self.verdict is not None:
            return self.verdict
        self.flight.append((now_s, float(in_flight)))
        lo = now_s - self.rule.window_s
        while self.flight and self.flight[0][0] < lo:
            self.flight.popleft()
        while self.ttft and self.ttft[0][0] < lo:
            self.ttft.popleft()
        if now_s < self.rule.min_elapsed_s:
            return None
        ft, fv = zip(*self.flight) if self.flight else ((), ())
        tt, tv = zip(*self.ttft) if self.ttft else ((), ())
        v = judge(now_s, ft, fv, tt, tv, rate_per_s=self.rate_per_s, rule=self.rule)
        if v.oversaturated:
            self.verdict = v
        return self.verdict
