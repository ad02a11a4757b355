"""Open-loop arrival schedules: seeded intended send times, computed up front, split across load workers.

A schedule is the list of instants (seconds after the run's t0) at which requests are *meant* to
be sent, independent of how the server responds; latency is then reported from the intended
instant as well as from the actual send, so a slow server cannot hide behind a slow client
(no coordinated omission). Kinds: constant, poisson, gamma (burstiness via the coefficient of
variation of inter-arrival gaps), ramp (rate changing linearly, Poisson thinning), burst (a batch at
t=0, then a steady rate) and trace (given timestamps, time-scaled).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import HarnessError

KINDS = ("constant", "poisson", "gamma", "ramp", "burst", "trace", "closed-loop")


@dataclass(frozen=True)
class Schedule:
    kind: str
    intended_s: np.ndarray = field(repr=False)  # sorted, seconds after t0
    seed: int
    params: dict[str, Any]

    @property
    def count(self) -> int:
        return int(self.intended_s.size)

    @property
    def span_s(self) -> float:
        return float(self.params.get("duration_s") or (self.intended_s[-1] if self.count else 0.0))

    @property
    def mean_rate_per_s(self) -> float:
        return self.count / self.span_s if self.span_s > 0 else math.inf

    def digest(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.intended_s, dtype="<f8").tobytes()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.seed, "params": dict(self.params), "count": self.count,
                "span_s": self.span_s, "mean_rate_per_s": self.mean_rate_per_s, "digest": self.digest()}


def _num(field_: str, v: Any, *, low: float = 0.0, strict: bool = True) -> float:
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and (v > low if strict else v >= low)
    if not ok:
        rel = ">" if strict else ">="
        raise HarnessError(f"schedule {field_} must be a finite number {rel} {low:g}, got {v!r}.")
    return float(v)


def constant(rate_per_s: float, duration_s: float, seed: int = 0) -> Schedule:
    """Evenly spaced: t_i = i/λ for t < duration."""
    lam, dur = _num("rate_per_s", rate_per_s), _num("duration_s", duration_s)
    t = np.arange(0.0, dur, 1.0 / lam)
    return Schedule("constant", t, seed, {"rate_per_s": lam, "duration_s": dur})


def gamma(rate_per_s: float, duration_s: float, cv: float = 1.0, seed: int = 0) -> Schedule:
    """Gamma-distributed gaps of mean 1/λ and coefficient of variation `cv` (cv 1 is Poisson; >1 bursty)."""
    lam, dur, cv = _num("rate_per_s", rate_per_s), _num("duration_s", duration_s), _num("cv", cv)
    rng = np.random.default_rng(seed)
    shape = 1.0 / cv**2
    n = int(lam * dur * 1.5 + 10 * math.sqrt(lam * dur) + 10)
    gaps = rng.gamma(shape, 1.0 / (lam * shape), size=n)
    t = np.cumsum(gaps) - gaps[0]  # the first request at t0
    while t[-1] < dur:
        more = rng.gamma(shape, 1.0 / (lam * shape), size=n)
        t = np.concatenate([t, t[-1] + np.cumsum(more)])
    kind = "poisson" if cv == 1.0 else "gamma"
    return Schedule(kind, t[t < dur], seed, {"rate_per_s": lam, "duration_s": dur, "cv": cv})


def poisson(rate_per_s: float, duration_s: float, seed: int = 0) -> Schedule:
    """Exponential gaps of mean 1/λ (a Poisson process)."""
    return gamma(rate_per_s, duration_s, 1.0, seed)


def ramp(rate_start_per_s: float, rate_end_per_s: float, duration_s: float, seed: int = 0) -> Schedule:
    """Poisson arrivals whose rate moves linearly from start to end (thinning of a λ_max process)."""
    a = _num("rate_start_per_s", rate_start_per_s, strict=False)
    b = _num("rate_end_per_s", rate_end_per_s, strict=False)
    dur = _num("duration_s", duration_s)
    lmax = max(a, b)
    if lmax <= 0:
        raise HarnessError("schedule ramp needs rate_start_per_s or rate_end_per_s above 0.")
    base = poisson(lmax, dur, seed).intended_s
    rng = np.random.default_rng(seed + 1)
    keep = rng.random(base.size) < (a + (b - a) * base / dur) / lmax
    return Schedule("ramp", base[keep], seed, {"rate_start_per_s": a, "rate_end_per_s": b, "duration_s": dur})


def burst(count: int, rate_per_s: float, duration_s: float, seed: int = 0) -> Schedule:
    """`count` requests at t=0 (a startup backlog arriving at once, §9.6.1), then Poisson at λ."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise HarnessError(f"schedule burst count must be an integer >= 0, got {count!r}.")
    rest = poisson(rate_per_s, duration_s, seed).intended_s
    t = np.concatenate([np.zeros(count), rest[rest > 0]])
    return Schedule("burst", t, seed, {"count": count, "rate_per_s": float(rate_per_s), "duration_s": float(duration_s)})


def trace(timestamps_s: Any, time_scale: float = 1.0, seed: int = 0) -> Schedule:
    """Replay given timestamps, shifted to start at 0 and multiplied by `time_scale` (0.5 = twice as fast)."""
    scale = _num("time_scale", time_scale)
    t = np.asarray(timestamps_s, dtype=float)
    if t.size == 0:
        raise HarnessError("schedule trace has no timestamps; give a non-empty trace.")
    if not np.all(np.isfinite(t)):
        raise HarnessError("schedule trace has non-finite timestamps; fix the trace file.")
    t = np.sort(t - t.min()) * scale
    return Schedule("trace", t, seed, {"time_scale": scale, "duration_s": float(t[-1])})


def closed_loop(count: int, duration_s: float, concurrency: int, seed: int = 0) -> Schedule:
    """No schedule: `concurrency` users each send their next request when the previous one ended, for `duration_s`,
    from a pool of `count` requests (all intended at t0; a request's intended instant is its actual send)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise HarnessError(f"closed-loop pool size must be an integer >= 1, got {count!r}.")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise HarnessError(f"--concurrency must be an integer >= 1, got {concurrency!r}.")
    dur = _num("duration_s", duration_s)
    return Schedule("closed-loop", np.zeros(count), seed, {"duration_s": dur, "concurrency": concurrency})


def make_schedule(kind: str, **params: Any) -> Schedule:
    """Build a schedule by kind name with keyword parameters (validated; errors name the field)."""
    fns = {"constant": constant, "poisson": poisson, "gamma": gamma, "ramp": ramp, "burst": burst, "trace": trace}
    if kind not in fns:
        raise HarnessError(f"schedule kind {kind!r} is unknown; known: {', '.join(KINDS)}.")
    try:
        return fns[kind](**params)
    except TypeError as exc:
        raise HarnessError(f"schedule {kind!r}: {exc}; see docs/loadgen.md for its parameters.") from None


def split_indices(n_items: int, worker_index: int, worker_count: int) -> np.ndarray:
    """Round-robin share of items for one worker: every worker gets the same rate, interleaved in time."""
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise HarnessError(f"worker_index must be in [0, {worker_count}), got {worker_index!r}.")
    return np.arange(worker_index, n_items, worker_count)
