"""Capacity: colocated replicas, PD over every integer allocation, and the ideal chunked bound.

Chapter 9: μ_co = Σ n/(d_P+d_D) (§9.1.1); μ_PD = min(μ_P, μ_D, B_net/V_KV) over every integer
split of every GPU type between P and D (§9.2.3, example 9.2, Fig. 9-10); ideal chunked-prefill
colocation runs prefill in the idle compute of memory-bound decode steps, so each GPU is bounded
by max(total compute time, total memory time) per request (§9.2.3: 4.50 for 8×A100, 4.17 hetero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.model.stages import StageRates


@dataclass(frozen=True, slots=True)
class PoolCount:
    gpu: str
    count: int


def colocated_rate(rates: Sequence[StageRates], counts: Sequence[int]) -> float:
    """μ_co = Σ_i n_i / (d_P,i + d_D,i)."""
    return float(sum(n / r.colocated_s_per_request for r, n in zip(rates, counts)))


def chunked_colocated_rate(rates: Sequence[StageRates], counts: Sequence[int]) -> float:
    """Ideal chunked prefill: Σ_i n_i / max(C_i, M_i), C and M the compute and memory seconds per request."""
    return float(sum(n / max(r.compute_s_per_request, r.memory_s_per_request) for r, n in zip(rates, counts)))


@dataclass(frozen=True, slots=True)
class PdAllocation:
    prefill: dict[str, int]
    decode: dict[str, int]
    requests_per_s: float
    prefill_pool_requests_per_s: float
    decode_pool_requests_per_s: float
    link_requests_per_s: float
    bound: Literal["prefill", "decode", "link", "empty-pool"]

    def to_dict(self) -> dict:
        return {
            "prefill": self.prefill,
            "decode": self.decode,
            "requests_per_s": self.requests_per_s,
            "prefill_pool_requests_per_s": self.prefill_pool_requests_per_s,
            "decode_pool_requests_per_s": self.decode_pool_requests_per_s,
            "link_requests_per_s": None if math.isinf(self.link_requests_per_s) else self.link_requests_per_s,
            "bound": self.bound,
        }


@dataclass(frozen=True, slots=True)
class PdGrid:
    """μ over the whole allocation grid; axis i is how many cards of gpus[i] go to P."""

    gpus: tuple[str, ...]
    counts: tuple[int, ...]
    prefill_pool: np.ndarray
    decode_pool: np.ndarray
    rate: np.ndarray
    link_requests_per_s: float
    prefill_s_per_request: tuple[float, ...]
    decode_s_per_request: tuple[float, ...]

    def allocation(self, index: tuple[int, ...]) -> PdAllocation:
        """One cell, recomputed exactly in float64 (large grids are searched in float32)."""
        index = tuple(int(k) for k in index)
        mp = sum(k / dp for k, dp in zip(index, self.prefill_s_per_request))
        md = sum((n - k) / dd for n, k, dd in zip(self.counts, index, self.decode_s_per_request))
        mu = min(mp, md, self.link_requests_per_s)
        if mp == 0 or md == 0:
            bound = "empty-pool"
            mu = 0.0
        elif self.link_requests_per_s <= min(mp, md):
            bound = "link"
        else:
            bound = "prefill" if mp <= md else "decode"
        return PdAllocation(
            prefill={g: int(k) for g, k in zip(self.gpus, index)},
            decode={g: int(n - k) for g, n, k in zip(self.gpus, self.counts, index)},
            requests_per_s=mu,
            prefill_pool_requests_per_s=mp,
            decode_pool_requests_per_s=md,
            link_requests_per_s=self.link_requests_per_s,
            bound=bound,  # type: ignore[arg-type]
        )

    def cells(self) -> list[PdAllocation]:
        return [self.allocation(idx) for idx in np.ndindex(self.rate.shape)]


def pd_grid(
    gpus: Sequence[str],
    prefill_s_per_request: Sequence[float],
    decode_s_per_request: Sequence[float],
    counts: Sequence[int],
    link_requests_per_s: float = math.inf,
) -> PdGrid:
    """Vectorised μ_PD for every allocation: μ_P = Σ k_i/d_P,i, μ_D = Σ (n_i-k_i)/d_D,i.

    Each pool sum is built by broadcasting one small axis at a time, so the full grid is touched
    by one add per pool, one minimum and (with a link) one in-place clip. Large grids use float32.
    """
    m = len(counts)
    if not (m == len(prefill_s_per_request) == len(decode_s_per_request) == len(gpus)):
        raise HarnessError("pd_grid: gpus, prefill and decode times and counts must have one entry per GPU type.")
    if m == 0:
        raise HarnessError("pools: at least one pool of GPUs is needed.")
    for name, seq in (("prefill_s_per_request", prefill_s_per_request), ("decode_s_per_request", decode_s_per_request)):
        for g, v in zip(gpus, seq):
            if not (v > 0 and math.isfinite(v)):
                raise HarnessError(f"pd_grid: {name} of {g} must be a positive finite number of seconds, got {v!r}.")
    size = math.prod(n + 1 for n in counts)
    dtype = np.float64 if size <= 2_000_000 else np.float32
    mu_p = np.zeros((), dtype=dtype)
    mu_d = np.zeros((), dtype=dtype)
    for i, (n, dp, dd) in enumerate(zip(counts, prefill_s_per_request, decode_s_per_request)):
        shape = [1] * m
        shape[i] = n + 1
        k = np.arange(n + 1, dtype=dtype).reshape(shape)
        mu_p = mu_p + k * dtype(1.0 / dp)
        mu_d = mu_d + (n - k) * dtype(1.0 / dd)
    rate = np.minimum(mu_p, mu_d)  # an empty pool gives exactly 0
    if math.isfinite(link_requests_per_s):
        np.minimum(rate, dtype(link_requests_per_s), out=rate)
    return PdGrid(
        tuple(gpus), tuple(int(c) for c in counts), mu_p, mu_d, rate, float(link_requests_per_s),
        tuple(float(x) for x in prefill_s_per_request), tuple(float(x) for x in decode_s_per_request),
    )


@dataclass(frozen=True, slots=True)
class PdSearch:
    best: PdAllocation
    optimal: list[PdAllocation]  # every allocation tied with the best (Fig. 9-10 frames them)
    grid: PdGrid


def pd_search(
    gpus: Sequence[str],
    prefill_s_per_request: Sequence[float],
    decode_s_per_request: Sequence[float],
    counts: Sequence[int],
    link_requests_per_s: float = math.inf,
    max_optimal: int = 64,
) -> PdSearch:
    """Best integer PD allocation. Ties (within 1e-6 relative) are all optimal (Fig. 9-10 frames
    them); the reported best among them keeps the most spare pool capacity (largest μ_P+μ_D)."""
    grid = pd_grid(gpus, prefill_s_per_request, decode_s_per_request, counts, link_requests_per_s)
    top = float(grid.rate.max())
    if top <= 0:
        raise HarnessError(
            "pools: no PD allocation serves any request; PD needs at least two GPUs so that both pools are non-empty."
        )
    tied = grid.rate >= top * (1 - 1e-6)
    score = np.where(tied, grid.prefill_pool + grid.decode_pool, -1.0)
    best = grid.allocation(np.unravel_index(int(np.argmax(score)), grid.rate.shape))
    optimal: list[PdAllocation] = []
    for i in range(tied.shape[0]):  # first few tied cells without materialising every index
        for flat in np.flatnonzero(tied[i])[: max_optimal - len(optimal)]:
            optimal.append(grid.allocation((i, *np.unravel_index(int(flat), tied.shape[1:]))))
        if len(optimal) >= max_optimal:
            break
    return PdSearch(best, optimal, grid)
