"""Capacity: colocated replicas, PD over every integer allocation, and the ideal chunked bound.

Chapter 9: μ_co = Σ n/(d_P+d_D) (§9.1.1); μ_PD = min(μ_P, μ_D, B_net/V_KV) over every integer
split of every GPU type between P and D (§9.2.3, example 9.2, Fig. 9-10); ideal chunked-prefill
colocation runs prefill in the idle compute of memory-bound decode steps, so each GPU is bounded
by max(total compute time, total memory time) per request (§9.2.3: 4.50 for 8×A100, 4.17 hetero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.model.record import as_json
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
        return as_json(self)  # an infinite link rate (no link declared) prints null


MAX_PD_ALLOCATIONS = 50_000_000  # the search visits every allocation: 4 types × 64 cards is 65⁴ ≈ 1.8e7
MAX_GRID_ARRAY_CELLS = 20_000_000  # arrays of the whole grid (float64, three of them) stay under ~0.5 GB
MAX_GRID_CELLS_LISTED = 100_000  # allocation records listed one by one (`plan --json` prints each)
_BLOCK_CELLS = 1 << 18  # the search scores the grid in blocks of this many cells, in C order


def _too_many(what: str, cells: int, limit: int, counts: Sequence[int], gpus: Sequence[str], fix: str) -> HarnessError:
    shape = " × ".join(f"{n + 1:,} ({g})" for g, n in zip(gpus, counts))
    return HarnessError(f"pools: {what} has {cells:,} allocations ({shape}), more than the {limit:,} this harness {fix}")


@dataclass(frozen=True, slots=True)
class PdGridArrays:
    """μ_P, μ_D and μ = min(μ_P, μ_D, link) for every allocation; axis i is how many cards of gpus[i] go to P."""

    prefill_pool_requests_per_s: np.ndarray
    decode_pool_requests_per_s: np.ndarray
    requests_per_s: np.ndarray


@dataclass(frozen=True, slots=True)
class PdGrid:
    """The allocation space: axis i is how many cards of gpus[i] go to P (the rest of that type go to D).

    It holds only the per-type rates; a cell is computed when asked for (`allocation`), the whole
    grid only by `arrays()` (bounded) or `cells()` (bounded), so a large cluster costs no memory.
    """

    gpus: tuple[str, ...]
    counts: tuple[int, ...]
    link_requests_per_s: float
    prefill_s_per_request: tuple[float, ...]
    decode_s_per_request: tuple[float, ...]
    cards_per_unit: tuple[int, ...] = ()  # cards of one instance per GPU type (tensor parallel); () = 1 each

    def _cards(self, i: int, units: int) -> int:
        return units * (self.cards_per_unit[i] if self.cards_per_unit else 1)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n + 1 for n in self.counts)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def allocation(self, index: tuple[int, ...]) -> PdAllocation:
        """One cell, computed exactly in float64."""
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
            prefill={g: self._cards(i, int(k)) for i, (g, k) in enumerate(zip(self.gpus, index))},
            decode={g: self._cards(i, int(n - k)) for i, (g, n, k) in enumerate(zip(self.gpus, self.counts, index))},
            requests_per_s=mu,
            prefill_pool_requests_per_s=mp,
            decode_pool_requests_per_s=md,
            link_requests_per_s=self.link_requests_per_s,
            bound=bound,  # type: ignore[arg-type]
        )

    def cells(self, max_cells: int = MAX_GRID_CELLS_LISTED) -> list[PdAllocation]:
        """Every allocation as a record, in C order; refused above `max_cells` (one record each is costly)."""
        if self.size > max_cells:
            raise _too_many("the PD grid", self.size, max_cells, self.counts, self.gpus,
                            "lists one by one; leave the grid out (`harness model plan --json --no-grid`): "
                            "the best and every tied allocation are still printed.")
        return [self.allocation(idx) for idx in np.ndindex(self.shape)]

    def arrays(self, max_cells: int = MAX_GRID_ARRAY_CELLS) -> PdGridArrays:
        """μ_P, μ_D and μ over the whole grid as arrays (for heatmaps); refused above `max_cells`."""
        if self.size > max_cells:
            raise _too_many("the PD grid", self.size, max_cells, self.counts, self.gpus, "holds in memory as arrays.")
        mu_p, mu_d, rate = _score(self, self._axes())
        return PdGridArrays(mu_p, mu_d, rate)

    def _axes(self) -> list[tuple[np.ndarray, float, float, int]]:
        return [(np.arange(n + 1, dtype=np.float64), 1.0 / dp, 1.0 / dd, n)
                for n, dp, dd in zip(self.counts, self.prefill_s_per_request, self.decode_s_per_request)]

    def blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """(first flat index, μ_P, μ_D, μ) over consecutive C-order blocks of at most ~_BLOCK_CELLS cells.

        The trailing axes that fit in one block are scored once by broadcasting; the leading axes
        are walked one index at a time and the axis between is cut into ranges. The arrays are
        buffers reused by the next block: use them before asking for it.
        """
        shape = self.shape
        m = len(shape)
        split = m  # axes split.. form the trailing block
        while split > 0 and math.prod(shape[split - 1:]) <= _BLOCK_CELLS:
            split -= 1
        axes = self._axes()
        if split == 0:
            mu_p, mu_d, rate = _score(self, axes)
            yield 0, mu_p.ravel(), mu_d.ravel(), rate.ravel()
            return
        if split < m:
            tail_p, tail_d, _ = _score(self, axes[split:], lead=False)
        else:
            tail_p = tail_d = np.zeros((), dtype=np.float64)
        tail_p, tail_d = tail_p.reshape(1, -1), tail_d.reshape(1, -1)
        tail_cells = tail_p.shape[1]
        ax = split - 1
        step = max(1, _BLOCK_CELLS // tail_cells)
        _, p_ax, d_ax, n_ax = axes[ax]
        buf_p, buf_d, buf_r = (np.empty(step * tail_cells, dtype=np.float64) for _ in range(3))
        link = self.link_requests_per_s
        for lead in np.ndindex(shape[:ax]):
            base_p = 0.0
            base_d = 0.0
            for k, (_, p, d, n) in zip(lead, axes[:ax]):
                base_p += k * p
                base_d += (n - k) * d
            lead_flat = int(np.ravel_multi_index(lead, shape[:ax])) * shape[ax] if ax else 0
            for k0 in range(0, shape[ax], step):
                k = np.arange(k0, min(shape[ax], k0 + step), dtype=np.float64)
                cells = len(k) * tail_cells
                mu_p, mu_d, rate = buf_p[:cells], buf_d[:cells], buf_r[:cells]
                np.add((base_p + k * p_ax)[:, None], tail_p, out=mu_p.reshape(len(k), tail_cells))
                np.add((base_d + (n_ax - k) * d_ax)[:, None], tail_d, out=mu_d.reshape(len(k), tail_cells))
                np.minimum(mu_p, mu_d, out=rate)
                if math.isfinite(link):
                    np.minimum(rate, link, out=rate)
                yield (lead_flat + k0) * tail_cells, mu_p, mu_d, rate


def _score(grid: PdGrid, axes: list[tuple[np.ndarray, float, float, int]], lead: bool = True
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """μ_P = Σ k_i/d_P,i and μ_D = Σ (n_i-k_i)/d_D,i over the given axes by broadcasting one axis at a
    time (an empty pool gives exactly 0), and μ = min(μ_P, μ_D, link)."""
    m = len(axes)
    mu_p = np.zeros((), dtype=np.float64)
    mu_d = np.zeros((), dtype=np.float64)
    for i, (k, p, d, n) in enumerate(axes):
        shape = [1] * m
        shape[i] = n + 1
        kk = k.reshape(shape)
        mu_p = mu_p + kk * p
        mu_d = mu_d + (n - kk) * d
    rate = np.minimum(mu_p, mu_d)
    if lead and math.isfinite(grid.link_requests_per_s):
        np.minimum(rate, grid.link_requests_per_s, out=rate)
    return mu_p, mu_d, rate


def pd_grid(
    gpus: Sequence[str],
    prefill_s_per_request: Sequence[float],
    decode_s_per_request: Sequence[float],
    counts: Sequence[int],
    link_requests_per_s: float = math.inf,
    cards_per_unit: Sequence[int] = (),
) -> PdGrid:
    """The allocation space of μ_PD: μ_P = Σ k_i/d_P,i, μ_D = Σ (n_i-k_i)/d_D,i, μ = min(μ_P, μ_D, link) (§9.2.3).
    `counts` are instances (cards / cards_per_unit); allocations report cards."""
    m = len(counts)
    if not (m == len(prefill_s_per_request) == len(decode_s_per_request) == len(gpus)):
        raise HarnessError("pd_grid: gpus, prefill and decode times and counts must have one entry per GPU type.")
    if m == 0:
        raise HarnessError("pools: at least one pool of GPUs is needed.")
    for name, seq in (("prefill_s_per_request", prefill_s_per_request), ("decode_s_per_request", decode_s_per_request)):
        for g, v in zip(gpus, seq):
            if not v > 0:  # math.inf: this GPU type cannot run the stage (its HBM does not hold it)
                raise HarnessError(f"pd_grid: {name} of {g} must be a positive number of seconds (or inf), got {v!r}.")
    return PdGrid(
        tuple(gpus), tuple(int(c) for c in counts), float(link_requests_per_s),
        tuple(float(x) for x in prefill_s_per_request), tuple(float(x) for x in decode_s_per_request),
        tuple(int(c) for c in cards_per_unit) if any(c != 1 for c in cards_per_unit) else (),
    )


@dataclass(frozen=True, slots=True)
class PdSearch:
    best: PdAllocation
    optimal: list[PdAllocation]  # every allocation tied with the best (Fig. 9-10 frames them), the first max_optimal
    grid: PdGrid


def pd_search(
    gpus: Sequence[str],
    prefill_s_per_request: Sequence[float],
    decode_s_per_request: Sequence[float],
    counts: Sequence[int],
    link_requests_per_s: float = math.inf,
    max_optimal: int = 64,
    cards_per_unit: Sequence[int] = (),
) -> PdSearch:
    """Best integer PD allocation. Ties (within 1e-6 relative) are all optimal (Fig. 9-10 frames
    them); the reported best among them keeps the most spare pool capacity (largest μ_P+μ_D).

    Every allocation is scored, block by block in C order (two passes: the top rate, then the
    tied cells), so memory stays at one block whatever the cluster; the number of allocations is
    bounded by MAX_PD_ALLOCATIONS."""
    grid = pd_grid(gpus, prefill_s_per_request, decode_s_per_request, counts, link_requests_per_s, cards_per_unit)
    if grid.size > MAX_PD_ALLOCATIONS:
        raise _too_many("the PD search", grid.size, MAX_PD_ALLOCATIONS, grid.counts, grid.gpus,
                        "searches; give fewer cards per pool (pools.count), or plan one group and scale it out "
                        "(deployment.scale_out gives the copies a load needs).")
    top = max(float(rate.max()) for _, _, _, rate in grid.blocks())
    if top <= 0:
        raise HarnessError(
            "pools: no PD allocation serves any request; PD needs at least two GPUs so that both pools are non-empty."
        )
    threshold = top * (1 - 1e-6)
    best_score, best_flat = -math.inf, -1
    optimal_flat: list[int] = []
    tied_buf = untied_buf = score_buf = np.empty(0)
    for start, mu_p, mu_d, rate in grid.blocks():
        n = rate.size
        if tied_buf.size < n:  # buffers reused block after block: allocating them each time costs more than the arithmetic
            tied_buf, untied_buf, score_buf = np.empty(n, dtype=bool), np.empty(n, dtype=bool), np.empty(n)
        tied = np.greater_equal(rate, threshold, out=tied_buf[:n])
        if not tied.any():
            continue
        score = np.add(mu_p, mu_d, out=score_buf[:n])
        np.copyto(score, -1.0, where=np.logical_not(tied, out=untied_buf[:n]))
        j = int(np.argmax(score))
        if score[j] > best_score:  # strictly: the first of equal scores in C order wins
            best_score, best_flat = float(score[j]), start + j
        if len(optimal_flat) < max_optimal:
            optimal_flat.extend(start + int(i) for i in np.flatnonzero(tied)[: max_optimal - len(optimal_flat)])
    best = grid.allocation(np.unravel_index(best_flat, grid.shape))
    optimal = [grid.allocation(np.unravel_index(i, grid.shape)) for i in optimal_flat]
    return PdSearch(best, optimal, grid)
