"""Where a load run's steady state begins, measured from its own requests, and how precisely its window pins a rate.

A run's steady figures mean something only once the target has worked off what its start piled up (a
startup backlog, §9.6.1 of Chapter 9, and the long-lived decode batch it leaves behind) and before arrivals
stop. By Little's law the completions in a window [w0, w1) are the arrivals in it minus the change of the
requests in flight, N(w1) − N(w0): while N falls the window's throughput is above the offered rate, while it
grows (an overloaded target) below it. So the state that must have settled is N(t), the requests offered
(intended send) and not yet ended, which every run has, whatever the target exposes.

* `in_flight_series`: the mean of N(t) over IN_FLIGHT_POINTS equal bins of [0, t_end), exact (interval overlaps).
  A closed loop holds N(t) at its users whatever the target does, so its state is `completion_series`, the
  completions per second, instead.
* `steady_start`: MSER-5 truncation of that series (White 1997; the heuristic Hoad, Robinson & Davies 2010
  found most reliable): the start d minimising the marginal standard error of the batch means after it,
  searched while at least a quarter of the series (and five batch means) remains. A minimum at the edge of the
  search means the series never settled; a truncation that moves the mean by less than twice the standard error of
  the batch means it keeps is noise, and none is made.
* `in_flight_trend`: the least-squares slope of N(t) over the window; −slope is what the window's throughput
  carries above the arrival rate. The window is steady when |slope| ≤ the throughput's own interval half-width.
* `rate_interval`: the 95 % batch-means interval of a rate counted in a window (events per sub-window,
  Student t over BATCHES equal sub-windows; fewer when the window holds few events).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

IN_FLIGHT_POINTS = 250  # bins of the requests-in-flight series over the schedule
MSER_BATCH = 5  # MSER-5: truncation on means of 5 bins
MSER_KEEP = 0.25  # the truncation leaves at least this share of the series
BATCHES = 10  # sub-windows of the batch-means interval
MIN_EVENTS_PER_BATCH = 5
T_975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}  # by number of batches
METHOD = "MSER-5 on the"  # how a window's start is said, followed by the series (docs/loadgen.md has the rest)


@dataclass(frozen=True)
class Series:
    """A run's state averaged per bin (requests in flight, or completions per second): bin i covers [edges[i], edges[i+1])."""

    edges_s: np.ndarray
    mean: np.ndarray

    def between(self, t0_s: float, t1_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(bin centres, means) of the bins inside [t0_s, t1_s)."""
        c = (self.edges_s[:-1] + self.edges_s[1:]) / 2
        m = (c >= t0_s) & (c < t1_s)
        return c[m], self.mean[m]


def in_flight_series(start_s: Any, end_s: Any, t_end_s: float, points: int = IN_FLIGHT_POINTS) -> Series | None:
    """N(t) averaged over `points` bins of [0, t_end_s): each request counts from `start_s` (its intended send) to
    `end_s` (its last byte, or when it failed; inf: never ended). O((n + points) log n)."""
    s = np.asarray(start_s, dtype=float)
    e = np.asarray(end_s, dtype=float)
    keep = np.isfinite(s)
    s, e = s[keep], np.where(np.isfinite(e[keep]), e[keep], np.inf)
    if not (t_end_s > 0) or s.size == 0:
        return None
    edges = np.linspace(0.0, t_end_s, points + 1)
    return Series(edges, np.diff(_area(s, edges) - _area(e, edges)) / np.diff(edges))


def completion_series(done_s: Any, t_end_s: float, points: int = IN_FLIGHT_POINTS) -> Series | None:
    """Completions per second over `points` bins of [0, t_end_s): a closed loop's state, where the requests in flight
    are the users whatever the target does (a start-up shows as a stretch without completions)."""
    t = np.asarray(done_s, dtype=float)
    t = t[np.isfinite(t)]
    if not (t_end_s > 0) or t.size == 0:
        return None
    edges = np.linspace(0.0, t_end_s, points + 1)
    counts, _ = np.histogram(t, bins=edges)
    return Series(edges, counts / np.diff(edges))


def _area(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Σ_i max(t − x_i, 0) at each t (x may hold inf)."""
    xs = np.sort(x)
    k = np.searchsorted(xs, t, side="right")
    csum = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(xs), xs, 0.0))])
    return k * t - csum[k]


@dataclass(frozen=True)
class SteadyStart:
    start_s: float | None  # None: the series never settled (the MSER minimum sat at the edge of its search)
    searched_to_s: float  # the last start the search allowed


def steady_start(series: Series) -> SteadyStart:
    """MSER-5 truncation point of the series."""
    y = series.mean
    n = y.size // MSER_BATCH
    width = float(series.edges_s[-1] - series.edges_s[0]) / y.size * MSER_BATCH
    last = n - max(5, int(math.ceil(n * MSER_KEEP)))
    if last < 1:
        return SteadyStart(0.0, 0.0)
    b = y[: n * MSER_BATCH].reshape(n, MSER_BATCH).mean(axis=1)
    # MSER(d) = Σ_{i>=d} (b_i − mean)² / (n − d)², for every d at once from suffix sums
    k = np.arange(n, 0, -1, dtype=float)  # n − d
    s1 = np.cumsum(b[::-1])[::-1]
    s2 = np.cumsum((b * b)[::-1])[::-1]
    mser = (s2 - s1 * s1 / k) / (k * k)
    d = int(np.argmin(mser[: last + 1]))
    if d == last:
        return SteadyStart(None, last * width)
    kept = b[d:]
    if d and abs(b.mean() - kept.mean()) <= 2 * kept.std(ddof=1) / math.sqrt(kept.size):
        d = 0  # what the truncation removes does not move the mean beyond its noise: no start-up to cut
    return SteadyStart(d * width, last * width)


def in_flight_trend(series: Series, t0_s: float, t1_s: float) -> float | None:
    """Least-squares slope (requests/s) of the in-flight series over [t0_s, t1_s); None with fewer than 3 bins."""
    c, m = series.between(t0_s, t1_s)
    if c.size < 3:
        return None
    return float(np.polyfit(c, m, 1)[0])


@dataclass(frozen=True)
class RateInterval:
    low_per_s: float
    high_per_s: float
    batches: int

    @property
    def half_width_per_s(self) -> float:
        return (self.high_per_s - self.low_per_s) / 2


def rate_interval(times_s: Any, t0_s: float, t1_s: float) -> RateInterval | None:
    """95 % batch-means interval of (events in [t0_s, t1_s)) / (t1_s − t0_s); None below 2 batches of
    MIN_EVENTS_PER_BATCH events."""
    t = np.asarray(times_s, dtype=float)
    t = t[(t >= t0_s) & (t < t1_s)]
    k = min(BATCHES, t.size // MIN_EVENTS_PER_BATCH)
    if k < 2 or not t1_s > t0_s:
        return None
    counts, _ = np.histogram(t, bins=np.linspace(t0_s, t1_s, k + 1))
    rates = counts / ((t1_s - t0_s) / k)
    half = T_975[k] * float(rates.std(ddof=1)) / math.sqrt(k)
    mean = t.size / (t1_s - t0_s)
    return RateInterval(max(0.0, float(mean - half)), float(mean + half), k)
