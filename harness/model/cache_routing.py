"""Cache-aware routing: time to first token of each path, tie bandwidths, the two-point model of an
uncertain hit, fetch link load and the queue-wait threshold (Chapter 9, §9.5.4, example 9.7)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import non_negative, positive

_OWNER = "cache routing"


def _dict(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _fraction(field: str, p: float, closed_low: bool = True) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 <= p <= 1) or (not closed_low and p == 0):
        raise HarnessError(f"{_OWNER}: {field} must be a probability in {'[0' if closed_low else '(0'}, 1], got {p!r}.")


def t_first_s(queue_s: float, ready_s: float, compute_s: float, overlap: bool = True) -> float:
    """T_first = max(Q, R) + C when the state is prepared while the GPU is busy; Q + R + C when the fetch
    may only start once the GPU is free (§9.5.4: Q = 80, R = 60, C = 10 ms -> 90 vs 150 ms)."""
    for f, v in (("queue_s", queue_s), ("ready_s", ready_s), ("compute_s", compute_s)):
        non_negative(_OWNER, f, v)
    return (max(queue_s, ready_s) if overlap else queue_s + ready_s) + compute_s


@dataclass(frozen=True, slots=True)
class RoutePath:
    name: str
    instance: str
    queue_s: float  # Q: earliest GPU start
    ready_s: float  # R: state ready, from arrival
    compute_s: float  # C: work left once the state is ready
    t_first_s: float

    def to_dict(self) -> dict:
        return _dict(self)


def route_path(name: str, instance: str, queue_s: float, ready_s: float, compute_s: float, overlap: bool = True) -> RoutePath:
    return RoutePath(name, instance, queue_s, ready_s, compute_s, t_first_s(queue_s, ready_s, compute_s, overlap))


def fetch_tie_bandwidth_bytes_per_s(target_t_first_s: float, queue_s: float, compute_s: float, payload_bytes: float,
                                    fixed_ready_s: float) -> float | None:
    """Remote-hop bandwidth at which max(Q, fixed + V/B) + C equals a target T_first (§9.5.4, exercise 9-9).

    B = V / (T_target − C − fixed); example 9.7: (281 − 30.9 − 10 − 48.3) ms = 191.7 ms budget -> 6.30 GB/s
    ties A's local hit; 907 ms (recompute on B) -> 1.48 GB/s. None when no bandwidth reaches the target
    (the budget is ≤ 0, or Q alone already exceeds T_target − C).
    """
    positive(_OWNER, "payload_bytes", payload_bytes)
    for f, v in (("target_t_first_s", target_t_first_s), ("queue_s", queue_s), ("compute_s", compute_s), ("fixed_ready_s", fixed_ready_s)):
        non_negative(_OWNER, f, v)
    ready_budget = target_t_first_s - compute_s
    if ready_budget < queue_s:
        return None
    hop_budget = ready_budget - fixed_ready_s
    return payload_bytes / hop_budget if hop_budget > 0 else None


@dataclass(frozen=True, slots=True)
class TwoPointTtft:
    hit_probability: float
    hit_s: float
    miss_s: float
    mean_s: float  # hit·p + miss·(1−p)
    quantile: float
    quantile_s: float  # inverse CDF at `quantile`

    def to_dict(self) -> dict:
        return _dict(self)


def two_point_ttft(hit_s: float, miss_s: float, hit_probability: float, quantile: float = 0.99) -> TwoPointTtft:
    """T_first is hit_s with probability p, miss_s otherwise (§9.5.4: 110.9 and 967.2 ms).

    E[T] = hit·p + miss·(1−p) (p = 0.9: 196.5 ms). Quantile q by the inverse CDF F⁻¹(q) = inf{t: F(t) ≥ q}:
    hit_s if p ≥ q, else miss_s (p = 0.9: p99 = 967 ms).
    """
    non_negative(_OWNER, "hit_s", hit_s)
    non_negative(_OWNER, "miss_s", miss_s)
    if hit_s > miss_s:
        raise HarnessError(f"{_OWNER}: hit_s ({hit_s}) must not exceed miss_s ({miss_s}); a hit is the fast path.")
    _fraction("hit_probability", hit_probability)
    _fraction("quantile", quantile, closed_low=False)
    p = hit_probability
    return TwoPointTtft(p, hit_s, miss_s, hit_s * p + miss_s * (1 - p), quantile, hit_s if p >= quantile else miss_s)


def min_hit_probability_for_mean(hit_s: float, miss_s: float, target_s: float) -> float | None:
    """p above which E[T] beats target: p > (miss − target)/(miss − hit) (§9.5.4: (967.2 − 907)/856.3 ≈ 7.0 %).
    0 when even a sure miss beats the target; None when even a sure hit does not."""
    if target_s <= hit_s:
        return None
    if target_s >= miss_s:
        return 0.0
    return (miss_s - target_s) / (miss_s - hit_s)


def min_hit_probability_for_quantile(hit_s: float, miss_s: float, target_s: float, quantile: float = 0.99) -> float | None:
    """p that brings the q-quantile down to the target: q when hit ≤ target < miss (§9.5.4: p99 ≤ 220 ms needs p ≥ 99 %),
    0 when the target is at least miss_s, None when it is below hit_s."""
    _fraction("quantile", quantile, closed_low=False)
    if target_s < hit_s:
        return None
    return 0.0 if target_s >= miss_s else quantile


@dataclass(frozen=True, slots=True)
class FetchLinkLoad:
    fetches_per_s: float
    payload_bytes: float
    demand_bytes_per_s: float  # fetches/s × V
    link_bytes_per_s: float
    utilization: float  # demand / link; ≥ 1 means the fetch queue grows without bound

    def to_dict(self) -> dict:
        return _dict(self)


def fetch_link_load(fetches_per_s: float, payload_bytes: float, link_bytes_per_s: float) -> FetchLinkLoad:
    """Aggregate load of remote fetches (§9.5.4: 16 fetches/s × 1.125 GiB ≈ 19.3 GB/s, ≈77 % of 25 GB/s)."""
    non_negative(_OWNER, "fetches_per_s", fetches_per_s)
    non_negative(_OWNER, "payload_bytes", payload_bytes)
    positive(_OWNER, "link_bytes_per_s", link_bytes_per_s)
    d = fetches_per_s * payload_bytes
    return FetchLinkLoad(fetches_per_s, payload_bytes, d, link_bytes_per_s, d / link_bytes_per_s)


@dataclass(frozen=True, slots=True)
class AffinityChoice:
    wait_s: float  # queue wait at the cache-holding instance A
    holder_prep_s: float  # A's serial preparation = its queue wait
    free_prep_s: float  # B's serial preparation: Σ transfer and restore steps
    threshold_s: float  # A wins while wait_s < threshold
    choice: Literal["cache-holder", "free-instance", "tie"]

    def to_dict(self) -> dict:
        return _dict(self)


def affinity_threshold_s(free_instance_prep_steps_s: list[float] | tuple[float, ...], free_instance_queue_s: float = 0.0) -> float:
    """Queue wait at the cache holder above which a free instance that must first rebuild the state starts
    earlier: B's queue + Σ its serial preparation steps, when the work after preparation is the same on both
    (§9.5.4, DeepSeek V4.1: 4.666 ms global KV transfer + 8 ms SWA restore = 12.666 ms)."""
    non_negative(_OWNER, "free_instance_queue_s", free_instance_queue_s)
    for v in free_instance_prep_steps_s:
        non_negative(_OWNER, "free instance prep step (s)", v)
    return free_instance_queue_s + sum(free_instance_prep_steps_s)


def affinity_choice(wait_s: float, free_instance_prep_steps_s: list[float] | tuple[float, ...], free_instance_queue_s: float = 0.0) -> AffinityChoice:
    """Pick the instance that starts the shared remaining work first (§9.5.4: 10 ms -> A, 20 ms -> B)."""
    non_negative(_OWNER, "wait_s", wait_s)
    thr = affinity_threshold_s(free_instance_prep_steps_s, free_instance_queue_s)
    choice = "cache-holder" if wait_s < thr else ("free-instance" if wait_s > thr else "tie")
    return AffinityChoice(wait_s, wait_s, thr, thr, choice)
