"""Scoring a sweep point: the reward of Chapter 19, §19.7, goodput, the best point and the Pareto front.

reward = output tokens/s − λ·max(0, p95 latency − SLA)            (§19.7, the continuous form)

λ (tokens/s per second of SLA excess) weighs throughput against the latency target: λ = 0 picks the
highest throughput whatever the latency; a large λ makes any excess dominate. The latency is the
p95 of the metric chosen (TTFT by default; TPOT, ITL or E2E), all in seconds. Goodput is the rate of
requests that met every SLO given (Chapter 9, §9.2.3: throughput under the SLO), reported beside the
reward and never folded into it. The Pareto front is the set of points no other point beats on both
throughput (higher) and p95 latency (lower). This is a search over a grid, not reinforcement learning:
§19.7's agent would learn the same reward online; here every setting is measured once and compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

from harness.errors import HarnessError


def reward(output_tokens_per_s: float, latency_p95_s: float, sla_s: float, lam: float) -> float:
    """tokens/s − λ·max(0, p95 − SLA) (§19.7)."""
    for name, v in (("output_tokens_per_s", output_tokens_per_s), ("latency_p95_s", latency_p95_s)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise HarnessError(f"reward: {name} must be a finite number >= 0, got {v!r}.")
    if not (math.isfinite(sla_s) and sla_s > 0):
        raise HarnessError(f"--sla-s must be a positive number of seconds, got {sla_s!r}.")
    if not (math.isfinite(lam) and lam >= 0):
        raise HarnessError(f"--lambda must be a finite number >= 0 (tokens/s per second over the SLA), got {lam!r}.")
    return output_tokens_per_s - lam * max(0.0, latency_p95_s - sla_s)


@dataclass(frozen=True, slots=True)
class ScoredPoint:
    index: int
    label: str
    output_tokens_per_s: float
    latency_p95_s: float
    reward: float
    goodput_per_s: float | None
    valid: bool  # the load run kept its schedule (its summary's verdict)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def pareto_front(points: Sequence[ScoredPoint]) -> list[ScoredPoint]:
    """Points not dominated on (throughput ↑, p95 ↓), by ascending p95. A point dominates another when it is at
    least as good on both and better on one; exact ties are all kept."""
    front = []
    for p in points:
        dominated = any(
            q.output_tokens_per_s >= p.output_tokens_per_s and q.latency_p95_s <= p.latency_p95_s
            and (q.output_tokens_per_s > p.output_tokens_per_s or q.latency_p95_s < p.latency_p95_s)
            for q in points
        )
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: (p.latency_p95_s, -p.output_tokens_per_s))


def best_point(points: Sequence[ScoredPoint]) -> ScoredPoint:
    """Highest reward; ties go to the lower p95, then the earlier point. Valid runs are preferred: an
    invalid run (the client fell behind its schedule) wins only when no valid run exists."""
    if not points:
        raise HarnessError("sweep: no point was measured; check the grid and the target.")
    pool = [p for p in points if p.valid] or list(points)
    return max(pool, key=lambda p: (p.reward, -p.latency_p95_s, -p.index))
