"""Deployment comparison: replicas vs direct PD vs PD through a shared pool, link demand, cost.

Chapter 9, §9.7.1–9.7.3 (example 9.8): link payload per request (0, V, 2V), link-limited rate
B/(payload), demand at the arrival rate and at capacity, cost per 1000 requests from an hourly
price, effective cost when only a fraction meets the SLO, the one-reuse pair, and how many copies
of the whole group a workload needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.model.kv import transfer_time_s
from harness.model.record import as_json


def cost_per_1000_requests(price_per_hour: float, requests_per_s: float) -> float | None:
    """price / (3600·rate) × 1000 (§9.7.2: 8/h at 3.5/s -> 0.63; at 3.02 -> 0.74; at 4.55 -> 0.49)."""
    if price_per_hour < 0:
        raise HarnessError(f"cost.price_per_hour must be >= 0, got {price_per_hour!r}.")
    if requests_per_s <= 0:
        return None
    return price_per_hour / (3600.0 * requests_per_s) * 1000.0


@dataclass(frozen=True, slots=True)
class SchemeRow:
    scheme: str  # "replicas" | "pd_direct" | "pd_pool"
    state: str  # which transferred state ("gqa", "mla", or a model name)
    link_bytes_per_request: float
    compute_requests_per_s: float
    link_requests_per_s: float | None
    requests_per_s: float
    link_demand_at_arrival_bytes_per_s: float
    link_demand_at_capacity_bytes_per_s: float
    handoff_latency_s: float  # time from P finishing to D holding the state

    def to_dict(self) -> dict:
        return as_json(self)


def scheme_rows(
    colocated_rate_per_s: float,
    pd_compute_rate_per_s: float,
    states: dict[str, float],
    link_bandwidth_bytes_per_s: float,
    link_startup_s: float,
    arrival_rate_per_s: float,
) -> list[SchemeRow]:
    """The §9.7.2 table: one replicas row, then direct and pooled PD for every transferred state.

    Through a pool the object is written, then read after the write completes, over the same
    shared link, so the payload doubles and the hand-off takes two transfers.
    """
    rows = [SchemeRow("replicas", "-", 0.0, colocated_rate_per_s, None, colocated_rate_per_s, 0.0, 0.0, 0.0)]
    for state, v in states.items():
        for scheme, hops in (("pd_direct", 1), ("pd_pool", 2)):
            payload = hops * v
            t = hops * transfer_time_s(v, link_bandwidth_bytes_per_s, link_startup_s)
            link_rate = 1.0 / t
            mu = min(pd_compute_rate_per_s, link_rate)
            rows.append(SchemeRow(
                scheme, state, payload, pd_compute_rate_per_s, link_rate, mu,
                arrival_rate_per_s * payload, mu * payload, t,
            ))
    return rows


@dataclass(frozen=True, slots=True)
class ReusePair:
    """§9.7.3: another instance reuses each request's state once through the pool."""

    transfers: int
    link_bytes_per_pair: float
    link_demand_bytes_per_s: float
    link_pairs_per_s: float
    extra_pool_latency_s: float
    fetch_latency_s: float
    recompute_s: float
    net_saving_s: float

    def to_dict(self) -> dict:
        return as_json(self)


def reuse_pair(
    state_bytes: float, link_bandwidth_bytes_per_s: float, link_startup_s: float,
    arrival_rate_per_s: float, recompute_s: float,
) -> ReusePair:
    """Write + read + one later read: 3V per pair (12.7 GB/s at 3.5 pairs/s, ≤6.9 pairs/s on 25 GB/s);
    the later reuse replaces recompute (0.856 s) by the pool hop and the fetch (≈96.6 ms): ≈760 ms saved."""
    t = transfer_time_s(state_bytes, link_bandwidth_bytes_per_s, link_startup_s)
    payload = 3 * state_bytes
    return ReusePair(
        transfers=3,
        link_bytes_per_pair=payload,
        link_demand_bytes_per_s=arrival_rate_per_s * payload,
        link_pairs_per_s=1.0 / (3 * t),
        extra_pool_latency_s=t,
        fetch_latency_s=t,
        recompute_s=recompute_s,
        net_saving_s=recompute_s - 2 * t,
    )


def pool_capacity_states(pool_bytes: float, state_bytes: float) -> int:
    """Whole states a shared pool holds (§9.7.2: 64 GiB / 1.125 GiB -> 56; MLA -> 119)."""
    return int(math.floor(pool_bytes / state_bytes))


@dataclass(frozen=True, slots=True)
class ScaleOut:
    group_requests_per_s: float
    copies_to_sustain: int | None
    copies_for_deadline: int | None
    rate_with_sustain_copies: float | None
    rate_with_deadline_copies: float | None

    def to_dict(self) -> dict:
        return as_json(self)


def scale_out(group_rate_per_s: float, arrival_rate_per_s: float, min_rate_for_deadline_per_s: float | None) -> ScaleOut:
    """Copies of the whole GPU group: the smallest k with k·μ > λ, and with k·μ ≥ μ_min for the
    deadline (§9.7.3: μ=1.26 -> 3 copies (3.78) to keep up, 4 copies (5.04) to clear by 60 s)."""
    if group_rate_per_s <= 0:
        return ScaleOut(group_rate_per_s, None, None, None, None)
    for name, rate in (("arrival_rate_per_s", arrival_rate_per_s), ("min_rate_for_deadline_per_s", min_rate_for_deadline_per_s)):
        if rate is not None and not math.isfinite(rate / group_rate_per_s):
            raise HarnessError(
                f"scale-out: {name} = {rate:g} needs more than 1e308 copies of a group serving {group_rate_per_s:g} req/s; "
                "give a rate in requests per second that a cluster can see."
            )
    k1 = math.floor(arrival_rate_per_s / group_rate_per_s) + 1
    k2 = None
    if min_rate_for_deadline_per_s is not None:
        k2 = max(1, math.ceil(min_rate_for_deadline_per_s / group_rate_per_s - 1e-12))
    return ScaleOut(
        group_rate_per_s, k1, k2, k1 * group_rate_per_s, None if k2 is None else k2 * group_rate_per_s,
    )
