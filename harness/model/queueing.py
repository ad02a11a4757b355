"""Queueing after a startup or burst, in the fluid model of Chapter 9, §9.6.1 and §9.7.2.

Backlog λ·T_s; drain T_drain = λ·T_s/(μ-λ); the queue clears at T_s + T_drain; for a deadline D
the service needs μ ≥ λ + λ·T_s/(D - T_s); when μ ≤ λ the queue grows by (λ-μ) per second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError
from harness.model.record import as_json, hidden


def _check(arrival_rate_per_s: float, startup_s: float) -> None:
    if not arrival_rate_per_s >= 0:
        raise HarnessError(f"arrival_rate_per_s must be >= 0, got {arrival_rate_per_s!r}.")
    if not startup_s >= 0:
        raise HarnessError(f"startup_s must be >= 0, got {startup_s!r}.")


def startup_backlog(arrival_rate_per_s: float, startup_s: float) -> float:
    """Requests waiting when the service becomes ready: λ·T_s (§9.6.1: 3.5/s × 10 s = 35)."""
    _check(arrival_rate_per_s, startup_s)
    return arrival_rate_per_s * startup_s


def drain_time_s(arrival_rate_per_s: float, startup_s: float, service_rate_per_s: float) -> float | None:
    """λ·T_s/(μ-λ) after readiness, or None when μ ≤ λ (the queue never clears)."""
    _check(arrival_rate_per_s, startup_s)
    if service_rate_per_s <= arrival_rate_per_s:
        return None if arrival_rate_per_s * startup_s > 0 else 0.0
    return arrival_rate_per_s * startup_s / (service_rate_per_s - arrival_rate_per_s)


def clear_at_s(arrival_rate_per_s: float, startup_s: float, service_rate_per_s: float) -> float | None:
    """Seconds after the start of startup when the backlog is gone (§9.6.1: PD 43 s, chunked 63 s)."""
    d = drain_time_s(arrival_rate_per_s, startup_s, service_rate_per_s)
    return None if d is None else startup_s + d


def min_rate_for_deadline(arrival_rate_per_s: float, startup_s: float, deadline_s: float) -> float:
    """μ ≥ λ + λ·T_s/(D - T_s) (§9.7.2: 3.5 + 35/50 = 4.2 req/s)."""
    _check(arrival_rate_per_s, startup_s)
    if deadline_s <= startup_s:
        raise HarnessError(
            f"startup.deadline_s ({deadline_s}) must be later than startup.startup_s ({startup_s}); "
            "the backlog cannot clear before the service is ready."
        )
    return arrival_rate_per_s + arrival_rate_per_s * startup_s / (deadline_s - startup_s)


def queue_length(arrival_rate_per_s: float, startup_s: float, service_rate_per_s: float, t_s: np.ndarray | float) -> np.ndarray:
    """Fluid queue length at time t (Fig. 9-42): grows λ·t until ready, then changes at λ-μ, floored at 0."""
    t = np.asarray(t_s, dtype=float)
    q_ready = arrival_rate_per_s * startup_s
    after = np.maximum(0.0, q_ready + (arrival_rate_per_s - service_rate_per_s) * (t - startup_s))
    return np.where(t < startup_s, arrival_rate_per_s * t, after)


@dataclass(frozen=True, slots=True)
class DrainResult:
    scheme: str = hidden()  # the key of plan.drain
    service_rate_per_s: float
    backlog_requests: float
    net_drain_per_s: float
    clear_at_s: float | None
    meets_deadline: bool | None
    queue_at_deadline: float | None

    def to_dict(self) -> dict:
        return as_json(self)


def drain(scheme: str, arrival_rate_per_s: float, startup_s: float, service_rate_per_s: float, deadline_s: float | None = None) -> DrainResult:
    clear = clear_at_s(arrival_rate_per_s, startup_s, service_rate_per_s)
    meets = None if deadline_s is None else (clear is not None and clear <= deadline_s)
    q_dl = None if deadline_s is None else float(queue_length(arrival_rate_per_s, startup_s, service_rate_per_s, deadline_s))
    return DrainResult(
        scheme, service_rate_per_s, startup_backlog(arrival_rate_per_s, startup_s),
        service_rate_per_s - arrival_rate_per_s, clear, meets, q_dl,
    )
