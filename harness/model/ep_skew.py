"""Skew under large expert parallelism: rows per card, random-routing imbalance, and the
dispatch/compute/combine lower bounds of an assignment matrix.

Chapter 9, §9.4.1 and example 9.5. Experts are spread over R cards by index (card r holds experts
r·E/R … (r+1)·E/R-1); the layer waits for the busiest card. From an assignment matrix a_ij (source i
to expert group j): V^D_ij = a_ij·d_D, V^C_ji = a_ij·d_C, m_j = Σ_i a_ij, s_expert = max_j m_j/(nk/R),
and each exchange X is bounded below by T_X ≥ max(max_i send_i/B_i, max_j recv_j/B_j, max_C V_C/B_C).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.model.expert_capacity import check_routing
from harness.specs._validate import non_negative, positive, positive_int


def _check_ep(n_experts: int, ep: int) -> None:
    positive_int("EP", "ep", ep)
    if n_experts % ep:
        raise HarnessError(
            f"EP: n_experts ({n_experts}) is not a multiple of ep ({ep}); experts are spread evenly by index, "
            "so pick an EP size that divides the expert count."
        )


@dataclass(frozen=True, slots=True)
class HotCardLoad:
    """One hot expert with exact shares, the rest spread evenly (Fig. 9-21)."""

    ep: int
    experts_per_card: int
    mean_rows_per_card: float  # n·k/R
    hot_card_rows: float  # hot rows + (E/R - 1)·(n·k - hot)/(E - 1)
    other_card_rows: float
    max_over_mean: float

    def to_dict(self) -> dict:
        return asdict(self)


def hot_expert_card_load(tokens: int, top_k: int, n_experts: int, ep: int, hot_expert_rows: float) -> HotCardLoad:
    """§9.4.1: n=1024, k=8, E=256, hot expert 128 rows -> ≈1108 rows (EP8), ≈349 (EP32), 128 (EP256)."""
    check_routing(n_experts, top_k, tokens)
    _check_ep(n_experts, ep)
    total = tokens * top_k
    if n_experts < 2:
        raise HarnessError("hot expert: needs at least two experts (one hot, the rest sharing the remaining rows).")
    if not (isinstance(hot_expert_rows, (int, float)) and math.isfinite(hot_expert_rows) and 0 <= hot_expert_rows <= tokens):
        raise HarnessError(
            f"hot expert: hot_expert_rows must be in [0, tokens] = [0, {tokens}] (a token picks an expert at most once), "
            f"got {hot_expert_rows!r}."
        )
    rest = (total - hot_expert_rows) / (n_experts - 1)
    if rest > tokens:
        raise HarnessError(
            f"hot expert: the other {n_experts - 1} experts would need {rest:.1f} rows each, more than the {tokens} tokens; "
            "raise hot_expert_rows."
        )
    per_card = n_experts // ep
    mean = total / ep
    hot = hot_expert_rows + (per_card - 1) * rest
    other = per_card * rest
    return HotCardLoad(ep, per_card, mean, hot, other, max(hot, other) / mean)


def sample_uniform_topk(rng: np.random.Generator, rows: int, n_experts: int, top_k: int) -> np.ndarray:
    """`rows` independent uniform draws of top_k distinct experts out of n_experts, shape (top_k, rows).

    Floyd's subset sampling, vectorised over rows: for j = E-k … E-1 draw t in [0, j]; if t was
    already taken, take j instead. Every k-subset is equally likely; only k passes over the rows.
    Column c of a row is its c-th pick; the pick-major layout keeps every pass contiguous.
    """
    check_routing(n_experts, top_k, rows)
    dtype = np.int16 if n_experts <= np.iinfo(np.int16).max else np.int32
    out = np.empty((top_k, rows), dtype=dtype)
    for c, j in enumerate(range(n_experts - top_k, n_experts)):
        t = rng.integers(0, j + 1, size=rows, dtype=dtype)
        if c:
            taken = out[0] == t
            for prev in range(1, c):
                taken |= out[prev] == t
            t[taken] = j
        out[c] = t
    return out


def simulate_expert_rows(tokens: int, top_k: int, n_experts: int, batches: int, seed: int) -> np.ndarray:
    """Rows per expert for `batches` batches of uniform random top-k routing, shape (batches, E)."""
    check_routing(n_experts, top_k, tokens)
    positive_int("routing simulation", "batches", batches)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise HarnessError(f"routing simulation: seed must be an integer >= 0, got {seed!r}.")
    rng = np.random.default_rng(seed)
    picks = sample_uniform_topk(rng, batches * tokens, n_experts, top_k)  # (k, batches·tokens), batch-major rows
    idx_dtype = np.int32 if batches * n_experts < np.iinfo(np.int32).max else np.int64
    flat = picks.astype(idx_dtype)
    flat += np.repeat(np.arange(batches, dtype=idx_dtype) * n_experts, tokens)[None, :]
    return np.bincount(flat.ravel(), minlength=batches * n_experts).reshape(batches, n_experts)


def card_rows(expert_rows: np.ndarray, ep: int) -> np.ndarray:
    """Sum expert rows into R cards by index blocks: (..., E) -> (..., R)."""
    rows = np.asarray(expert_rows)
    n_experts = rows.shape[-1]
    _check_ep(n_experts, ep)
    return rows.reshape(*rows.shape[:-1], ep, n_experts // ep).sum(axis=-1)


@dataclass(frozen=True, slots=True)
class RandomSkew:
    """max/mean card rows under uniform random routing, averaged over simulated batches (Fig. 9-22)."""

    ep: int
    batches: int
    seed: int
    mean_max_over_mean: float
    std_max_over_mean: float
    p99_max_over_mean: float
    worst_max_over_mean: float

    def to_dict(self) -> dict:
        return asdict(self)


def random_routing_skew(
    tokens: int, top_k: int, n_experts: int, ep_sizes: Sequence[int], batches: int, seed: int
) -> list[RandomSkew]:
    """One simulation, every EP size read from it (§9.4.1: ≈1.04 at EP8, ≈1.52 at EP256, 1000 batches)."""
    for ep in ep_sizes:
        _check_ep(n_experts, ep)
    rows = simulate_expert_rows(tokens, top_k, n_experts, batches, seed)
    out = []
    for ep in ep_sizes:
        cards = card_rows(rows, ep)
        ratio = cards.max(axis=1) / (tokens * top_k / ep)
        out.append(RandomSkew(
            ep, batches, seed, float(ratio.mean()), float(ratio.std()),
            float(np.percentile(ratio, 99)), float(ratio.max()),
        ))
    return out


def _matrix(assignments: Sequence[Sequence[float]] | np.ndarray, shape: tuple[int, int] | None) -> np.ndarray:
    try:
        a = np.asarray(assignments, dtype=np.float64)
    except (TypeError, ValueError):
        raise HarnessError("assignments: a_ij must be a rectangular matrix of numbers (one row per source).") from None
    if a.ndim != 2 or a.size == 0:
        raise HarnessError(
            f"assignments: a_ij must be a non-empty 2-D matrix (sources × expert groups), got shape {a.shape}."
        )
    if shape is not None and a.shape != tuple(shape):
        raise HarnessError(
            f"assignments: a_ij has shape {a.shape[0]}×{a.shape[1]} but the scenario has {shape[0]} sources × "
            f"{shape[1]} expert groups; give one row per source and one column per group."
        )
    if not np.all(np.isfinite(a)) or (a < 0).any():
        raise HarnessError("assignments: every a_ij must be a finite count >= 0.")
    return a


def s_expert(assignments: Sequence[Sequence[float]] | np.ndarray) -> float:
    """s_expert = max_j m_j / (n·k/R) with m_j = Σ_i a_ij (§9.4.1; example 9.5: 1 -> 2.5)."""
    a = _matrix(assignments, None)
    m = a.sum(axis=0)
    total = m.sum()
    if total <= 0:
        raise HarnessError("assignments: a_ij sums to zero; there is no expert work to balance.")
    return float(m.max() / (total / a.shape[1]))


def _vector(v: float | Sequence[float], n: int, field: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(v, dtype=np.float64))
    if arr.size == 1:
        arr = np.full(n, arr.item())
    if arr.shape != (n,):
        raise HarnessError(f"{field}: give one bandwidth or one per endpoint ({n}), got {arr.size}.")
    if not np.all(np.isfinite(arr)) or (arr <= 0).any():
        raise HarnessError(f"{field}: every bandwidth must be a positive finite number of bytes per second.")
    return arr


@dataclass(frozen=True, slots=True)
class Cut:
    """A physical cut of the network: the (source, group) pairs whose traffic crosses it, per direction."""

    name: str
    bandwidth_bytes_per_s: float
    mask: tuple[tuple[bool, ...], ...] | None = None  # None: every pair crosses

    def __post_init__(self) -> None:
        positive(f"cut {self.name!r}", "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)


Limiter = Literal["sender", "receiver", "cut", "none"]


@dataclass(frozen=True, slots=True)
class ExchangeBound:
    """Lower bound of one all-to-all (dispatch or combine): launches, queues and lateness not counted."""

    exchange: Literal["dispatch", "combine"]
    bytes_per_row: float
    total_bytes: float
    sender_s: float  # max over senders of bytes sent / B_send
    receiver_s: float  # max over receivers of bytes received / B_recv
    cut_s: float  # max over cuts of bytes crossing / B_cut
    bound_s: float
    limiter: Limiter
    sent_bytes: tuple[float, ...] = field(default=())
    received_bytes: tuple[float, ...] = field(default=())

    def to_dict(self) -> dict:
        return asdict(self)


def exchange_lower_bound(
    assignments: Sequence[Sequence[float]] | np.ndarray,
    bytes_per_row: float,
    exchange: Literal["dispatch", "combine"],
    source_bandwidth_bytes_per_s: float | Sequence[float],
    group_bandwidth_bytes_per_s: float | Sequence[float],
    cuts: Sequence[Cut] = (),
) -> ExchangeBound:
    """T_X ≥ max(max_i Σ_j V_ij/B^send_i, max_j Σ_i V_ij/B^recv_j, max_C V_C/B_C) (§9.4.1).

    Dispatch sends V^D_ij = a_ij·d_D from source i to group j; combine sends V^C_ji = a_ij·d_C back,
    so groups send and sources receive. Each endpoint's NIC bandwidth is per direction.
    """
    a = _matrix(assignments, None)
    positive(exchange, "bytes_per_row", bytes_per_row)
    if exchange not in ("dispatch", "combine"):
        raise HarnessError(f"exchange must be 'dispatch' or 'combine', got {exchange!r}.")
    n_src, n_grp = a.shape
    b_src = _vector(source_bandwidth_bytes_per_s, n_src, "source_bandwidth_bytes_per_s")
    b_grp = _vector(group_bandwidth_bytes_per_s, n_grp, "group_bandwidth_bytes_per_s")
    v = a * bytes_per_row  # bytes between source i and group j, in this exchange's direction
    src_bytes, grp_bytes = v.sum(axis=1), v.sum(axis=0)
    if exchange == "dispatch":
        sent, sent_bw, recv, recv_bw = src_bytes, b_src, grp_bytes, b_grp
    else:
        sent, sent_bw, recv, recv_bw = grp_bytes, b_grp, src_bytes, b_src
    t_send = float((sent / sent_bw).max())
    t_recv = float((recv / recv_bw).max())
    t_cut = 0.0
    for c in cuts:
        if c.mask is None:
            crossing = float(v.sum())
        else:
            mask = np.asarray(c.mask, dtype=bool)
            if mask.shape != a.shape:
                raise HarnessError(
                    f"cut {c.name!r}: mask has shape {mask.shape} but a_ij is {a.shape[0]}×{a.shape[1]}; "
                    "mark one flag per (source, group) pair."
                )
            crossing = float(v[mask].sum())
        t_cut = max(t_cut, crossing / c.bandwidth_bytes_per_s)
    bound = max(t_send, t_recv, t_cut)
    if bound == 0:
        limiter: Limiter = "none"
    else:
        limiter = "sender" if bound == t_send else ("receiver" if bound == t_recv else "cut")
    return ExchangeBound(
        exchange, float(bytes_per_row), float(v.sum()), t_send, t_recv, t_cut, bound, limiter,
        tuple(float(x) for x in sent), tuple(float(x) for x in recv),
    )


@dataclass(frozen=True, slots=True)
class EpLayerBound:
    """One row of the example 9.5 table: dispatch, busiest-card compute, combine, and their barrier sum."""

    name: str
    group_rows: tuple[float, ...]  # m_j
    s_expert: float
    dispatch: ExchangeBound
    compute_s: float  # max_j m_j·F_a / C_j
    combine: ExchangeBound
    barrier_total_s: float  # dispatch + compute + combine with a whole-batch barrier between stages

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dispatch"] = self.dispatch.to_dict()
        d["combine"] = self.combine.to_dict()
        return d


def ep_layer_bound(
    name: str,
    assignments: Sequence[Sequence[float]] | np.ndarray,
    dispatch_bytes_per_row: float,
    combine_bytes_per_row: float,
    flops_per_assignment: float,
    group_flops_per_s: float | Sequence[float],
    source_bandwidth_bytes_per_s: float | Sequence[float],
    group_bandwidth_bytes_per_s: float | Sequence[float],
    cuts: Sequence[Cut] = (),
    expected_shape: tuple[int, int] | None = None,
) -> EpLayerBound:
    """Example 9.5: uniform 4×4 cross-server 0.336/0.156/0.336 -> 0.827 ms; hot [5120,1024,1024,1024]
    0.839/0.391/0.839 -> 2.068 ms; one 400G link between pools 2.841 ms; FP8 dispatch 1.649 ms;
    NVLink 0.093/0.391/0.093 -> 0.577 ms. Weight reads, padding, launches and queues are left out."""
    a = _matrix(assignments, expected_shape)
    positive(name, "flops_per_assignment", flops_per_assignment)
    c = _vector(group_flops_per_s, a.shape[1], "group_flops_per_s")
    m = a.sum(axis=0)
    d = exchange_lower_bound(a, dispatch_bytes_per_row, "dispatch", source_bandwidth_bytes_per_s, group_bandwidth_bytes_per_s, cuts)
    cb = exchange_lower_bound(a, combine_bytes_per_row, "combine", source_bandwidth_bytes_per_s, group_bandwidth_bytes_per_s, cuts)
    comp = float((m * flops_per_assignment / c).max())
    return EpLayerBound(
        name, tuple(float(x) for x in m), s_expert(a), d, comp, cb, d.bound_s + comp + cb.bound_s,
    )


def card_exchange_s(rows: float, bytes_per_row: float, bandwidth_bytes_per_s: float) -> float:
    """Bytes one card receives in dispatch (or sends in combine) over its own link (§9.4.1: hot card at
    EP256 1 MiB ≈ 21 µs at 50 GB/s; the mean card 256 KiB ≈ 5.2 µs)."""
    non_negative("card exchange", "rows", rows)
    positive("card exchange", "bytes_per_row", bytes_per_row)
    positive("card exchange", "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    return rows * bytes_per_row / bandwidth_bytes_per_s
