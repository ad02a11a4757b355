"""Padding and overlap in an MoE layer: grouped-GEMM rows, the dispatch/compute/combine pipeline,
the slowdowns that cancel its gain, and when a token's merge can finish.

Chapter 9, §9.4.3 (Fig. 9-25 to 9-27). Grouped GEMM pads each expert's rows up to a tile; splitting
the batch into q micro-batches overlaps the three stages (Σ t_k/q + (q-1)·max_k t_k/q); a token
merges at T_t = max_{e∈E(t)} L_{t,e} + T_merge, so only its slowest branch matters.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.model.pipeline import split_batch_makespan_s
from harness.specs._validate import non_negative, positive_int


@dataclass(frozen=True, slots=True)
class PaddedRows:
    rows_per_expert: tuple[int, ...]
    tile_rows: int
    useful_rows: int  # Σ m_e (64 for [32,16,8,4,2,1,1,0])
    padded_nonempty_rows: int  # Σ_{m_e>0} ⌈m_e/T⌉·T (224 at T=32)
    padded_all_rows: int  # every expert padded to the largest padded size (256)
    nonempty_over_useful: float  # 3.5
    all_over_useful: float  # 4.0

    def to_dict(self) -> dict:
        return asdict(self)


def padded_rows(rows_per_expert: Sequence[int], tile_rows: int) -> PaddedRows:
    """Rows a grouped GEMM actually computes when each expert is padded to whole tiles (§9.4.3)."""
    positive_int("padding", "tile_rows", tile_rows)
    rows = tuple(rows_per_expert)
    if not rows:
        raise HarnessError("padding: rows_per_expert is empty; give one row count per local expert.")
    for i, r in enumerate(rows):
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise HarnessError(f"padding: rows_per_expert[{i}] must be an integer >= 0, got {r!r}.")
    useful = sum(rows)
    nonempty = sum(math.ceil(r / tile_rows) * tile_rows for r in rows if r > 0)
    largest = max(math.ceil(max(rows) / tile_rows), 1) * tile_rows
    all_rows = len(rows) * largest
    return PaddedRows(
        rows, tile_rows, useful, nonempty, all_rows,
        nonempty / useful if useful else math.inf, all_rows / useful if useful else math.inf,
    )


@dataclass(frozen=True, slots=True)
class OverlapGain:
    """Whole-batch dispatch/compute/combine bounds, serial vs split into q micro-batches."""

    dispatch_s: float
    compute_s: float
    combine_s: float
    microbatches: int
    serial_s: float  # with a barrier between stages (Fig. 9-25: 0.827 ms)
    pipelined_s: float  # ideal pipeline (Fig. 9-26: 0.581 ms)
    saving_s: float  # 0.246 ms
    communication_slowdown_to_cancel: float  # factor on dispatch and combine that brings it back to serial (≈1.49)
    compute_slowdown_to_cancel: float  # factor on compute alone that does the same (≈3.1)

    def to_dict(self) -> dict:
        return asdict(self)


def _solve_factor(makespan: Callable[[float], float], target: float) -> float:
    """Smallest factor ≥ 1 with makespan(factor) ≥ target; the makespan grows monotonically in it."""
    if makespan(1.0) >= target:
        return 1.0
    lo, hi = 1.0, 2.0
    while makespan(hi) < target:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if makespan(mid) < target else (lo, mid)
    return hi


def overlap_gain(dispatch_s: float, compute_s: float, combine_s: float, microbatches: int = 2) -> OverlapGain:
    """§9.4.3: 0.336/0.156/0.336 ms in two micro-batches -> 0.581 ms; the gain is gone if NIC DMA
    contending with GEMM for HBM slows both exchanges by ≈49 %, or if expert compute is ≈3.1× slower."""
    for name, v in (("dispatch_s", dispatch_s), ("compute_s", compute_s), ("combine_s", combine_s)):
        non_negative("overlap", name, v)
    positive_int("overlap", "microbatches", microbatches)
    serial = dispatch_s + compute_s + combine_s
    pipe = split_batch_makespan_s([dispatch_s, compute_s, combine_s], microbatches)
    comm = _solve_factor(lambda f: split_batch_makespan_s([f * dispatch_s, compute_s, f * combine_s], microbatches), serial) \
        if dispatch_s + combine_s > 0 else math.inf
    comp = _solve_factor(lambda g: split_batch_makespan_s([dispatch_s, g * compute_s, combine_s], microbatches), serial) \
        if compute_s > 0 else math.inf
    return OverlapGain(dispatch_s, compute_s, combine_s, microbatches, serial, pipe, serial - pipe, comm, comp)


@dataclass(frozen=True, slots=True)
class TokenCompletion:
    completion_s: tuple[float, ...]  # T_t per token
    slowest_branch_s: tuple[float, ...]  # max_e L_{t,e}
    idle_after_fastest_s: tuple[float, ...]  # how long the fastest result waits for the slowest
    batch_barrier_s: float  # max_t T_t: when a whole-batch barrier releases

    def to_dict(self) -> dict:
        return asdict(self)


def token_completion(path_latency_s: Sequence[Sequence[float]], merge_s: float | Sequence[float] = 0.0) -> TokenCompletion:
    """T_t = max_{e∈E(t)} L_{t,e} + T_merge,t (§9.4.3, Fig. 9-27: branches 0.5 and 1.4 ms merge at
    1.4 ms; cutting the fast one to 0.3 ms changes nothing). Rows are tokens, entries the latencies
    of the experts that token chose (rows may differ in length)."""
    rows = [list(r) for r in path_latency_s]
    if not rows:
        raise HarnessError("token completion: give at least one token's branch latencies.")
    width = max(len(r) for r in rows)
    if any(len(r) == 0 for r in rows):
        raise HarnessError("token completion: every token needs at least one chosen expert's latency.")
    lat = np.full((len(rows), width), np.nan)
    for t, r in enumerate(rows):
        lat[t, : len(r)] = r
    chosen = ~np.isnan(lat)
    if not np.all(np.isfinite(lat[chosen])) or (lat[chosen] < 0).any():
        raise HarnessError("token completion: every branch latency must be a finite time in seconds >= 0.")
    merge = np.broadcast_to(np.asarray(merge_s, dtype=np.float64), (len(rows),)) if np.ndim(merge_s) == 0 else np.asarray(merge_s, dtype=np.float64)
    if merge.shape != (len(rows),) or not np.all(np.isfinite(merge)) or (merge < 0).any():
        raise HarnessError(f"token completion: merge_s must be one time >= 0 or one per token ({len(rows)}).")
    slow = np.nanmax(lat, axis=1)
    fast = np.nanmin(lat, axis=1)
    done = slow + merge
    return TokenCompletion(
        tuple(float(x) for x in done), tuple(float(x) for x in slow), tuple(float(x) for x in slow - fast), float(done.max()),
    )
