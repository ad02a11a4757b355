"""Expert replicas: what a copy of a hot expert saves per batch, what the copy costs, and when it pays.

Chapter 9, §9.4.2 and example 9.6. Card time is max(F/C, bytes/B_HBM); a replica takes half the
rows of a hot expert to a card with room for W_e; the copy runs the replicas one after another
from the hot card, n·(α + W_e/B); it pays back after N_min = ⌊T_copy/Δt⌋ + 1 batches and nets
N·Δt - T_copy after N. Resident replicas cost layers × replicas × W_e of HBM, and a shared expert
pool is stable only when λ·E[F_j] < C_j for every card (and λ·E[V_l] < B_l for every link).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from harness.errors import HarnessError
from harness.specs._validate import non_negative, positive, positive_int


@dataclass(frozen=True, slots=True)
class TiledExpertShape:
    """Expert GEMM traffic under a tile schedule (an M-tile of rows re-reads the weights, an N-tile
    of outputs re-reads the input rows)."""

    hidden_size: int  # h
    intermediate_size: int  # I (gate and up are h×I each, down is I×h)
    weight_bytes_per_param: float
    activation_bytes_per_elem: float
    tile_m: int  # rows per weight pass
    tile_n: int  # output columns per input pass

    def __post_init__(self) -> None:
        for f in ("hidden_size", "intermediate_size", "tile_m", "tile_n"):
            positive_int("tiled expert", f, getattr(self, f))
        positive("tiled expert", "weight_bytes_per_param", self.weight_bytes_per_param)
        positive("tiled expert", "activation_bytes_per_elem", self.activation_bytes_per_elem)

    @property
    def params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def weight_bytes(self) -> float:
        return self.params * self.weight_bytes_per_param

    @property
    def activation_bytes_per_row(self) -> float:
        """h·b·⌈2I/T_n⌉ (gate/up input re-reads) + 2I·b (gate/up out) + I·b·⌈h/T_n⌉ (down input re-reads) + h·b (out).

        Qwen3-235B-A22B BF16 with T_n = 128: 192 + 6 + 96 + 8 = 302 KiB per row.
        """
        h, i, b, tn = self.hidden_size, self.intermediate_size, self.activation_bytes_per_elem, self.tile_n
        return b * (h * math.ceil(2 * i / tn) + 2 * i + i * math.ceil(h / tn) + h)

    def hbm_bytes(self, rows: int) -> float:
        """⌈m/T_m⌉·W_e + m·(activation bytes per row); an expert with no rows is not run.

        The chapter gives only the totals (≈921 MB before, a 402,784,256-byte saving, footnote 14);
        T_m = 64, T_n = 128 reproduce both exactly: 878 KiB per row when every M-tile is full.
        """
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise HarnessError(f"tiled expert: rows must be an integer >= 0, got {rows!r}.")
        if rows == 0:
            return 0.0
        return math.ceil(rows / self.tile_m) * self.weight_bytes + rows * self.activation_bytes_per_row

    def flops(self, rows: int) -> float:
        return 2.0 * rows * self.params


@dataclass(frozen=True, slots=True)
class CardTime:
    card: int
    rows: int
    flops: float
    hbm_bytes: float
    compute_s: float
    memory_s: float
    time_s: float  # max(F/C, bytes/B)
    bound: str

    def to_dict(self) -> dict:
        return asdict(self)


def card_time(card: int, expert_rows: Sequence[int], shape: TiledExpertShape, flops_per_s: float, hbm_bytes_per_s: float) -> CardTime:
    """max(Σ F_e/C, Σ bytes_e/B) for the experts (row counts) a card runs in one batch (§9.4.1)."""
    positive("card", "flops_per_s", flops_per_s)
    positive("card", "hbm_bytes_per_s", hbm_bytes_per_s)
    f = sum(shape.flops(r) for r in expert_rows)
    b = sum(shape.hbm_bytes(r) for r in expert_rows)
    tc, tm = f / flops_per_s, b / hbm_bytes_per_s
    return CardTime(card, int(sum(expert_rows)), f, b, tc, tm, max(tc, tm), "compute" if tc >= tm else "memory")


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """Replicas of the hottest experts of one card placed one per receiving card (example 9.6)."""

    replicas: int
    replica_bytes_total: float  # n·W_e (7 × 36 MiB = 252 MiB)
    bytes_per_receiver: float  # W_e
    free_bytes_per_receiver: float
    feasible: bool  # every receiver has room for one expert
    reason: str
    before: tuple[CardTime, ...]
    after: tuple[CardTime, ...]  # hot card first, then the receivers
    before_s: float  # max over cards
    after_s: float
    saving_per_batch_s: float  # Δt (0.550 -> 0.309 ms: ≈0.240 ms)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["before"] = [c.to_dict() for c in self.before]
        d["after"] = [c.to_dict() for c in self.after]
        return d


def plan_replicas(
    hot_card_expert_rows: Sequence[int],
    replicas: int,
    shape: TiledExpertShape,
    flops_per_s: float,
    hbm_bytes_per_s: float,
    free_bytes_per_receiver: float,
) -> ReplicaPlan:
    """Copy the `replicas` busiest experts of the hot card, one to each idle card, and split each
    one's rows evenly (the replica takes ⌊m/2⌋). Example 9.6: 8 experts × 128 rows on card 0,
    7 replicas -> card 0 keeps 576 assignments, 0.550 ms -> 0.309 ms. When a receiver cannot hold
    W_e the plan is infeasible and nothing changes, however long the hot spot lasts."""
    rows = [int(r) for r in hot_card_expert_rows]
    if not rows or any(r < 0 for r in rows):
        raise HarnessError(f"hot card: expert rows must be a non-empty list of integers >= 0, got {list(hot_card_expert_rows)!r}.")
    non_negative("replicas", "free_bytes_per_receiver", free_bytes_per_receiver)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= len(rows):
        raise HarnessError(
            f"replicas must be an integer in [0, {len(rows)}] (at most one replica per expert on the hot card), got {replicas!r}."
        )
    before = (card_time(0, rows, shape, flops_per_s, hbm_bytes_per_s),)
    w = shape.weight_bytes
    feasible = free_bytes_per_receiver >= w or replicas == 0
    reason = "ok" if feasible else (
        f"each receiving card has {free_bytes_per_receiver / 2**20:.0f} MiB free but one expert needs "
        f"{w / 2**20:.0f} MiB; free memory or change the placement first"
    )
    if not feasible:
        after = before
    else:
        order = sorted(range(len(rows)), key=lambda e: -rows[e])[:replicas]
        kept = list(rows)
        moved = []
        for e in order:
            half = rows[e] // 2
            kept[e] = rows[e] - half
            moved.append(half)
        after = (card_time(0, kept, shape, flops_per_s, hbm_bytes_per_s),) + tuple(
            card_time(k + 1, [r], shape, flops_per_s, hbm_bytes_per_s) for k, r in enumerate(moved)
        )
    b_s = max(c.time_s for c in before)
    a_s = max(c.time_s for c in after)
    return ReplicaPlan(
        replicas=replicas if feasible else 0,
        replica_bytes_total=replicas * w if feasible else 0.0,
        bytes_per_receiver=w,
        free_bytes_per_receiver=free_bytes_per_receiver,
        feasible=feasible,
        reason=reason,
        before=before,
        after=after,
        before_s=b_s,
        after_s=a_s,
        saving_per_batch_s=b_s - a_s,
    )


def copy_time_s(replicas: int, expert_bytes: float, bandwidth_bytes_per_s: float, startup_latency_s: float) -> float:
    """T_copy = n·(α + W_e/B), replicas sent one after another over the source card's link
    (example 9.6: NVLink 450 GB/s -> 0.62220256 ms, ConnectX-7 50 GB/s -> 5.31982304 ms)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise HarnessError(f"copy: replicas must be an integer >= 0, got {replicas!r}.")
    positive("copy", "expert_bytes", expert_bytes)
    positive("copy", "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    non_negative("copy", "startup_latency_s", startup_latency_s)
    return replicas * (startup_latency_s + expert_bytes / bandwidth_bytes_per_s)


def payback_batches(copy_s: float, saving_per_batch_s: float) -> int | None:
    """N_min = ⌊T_copy/Δt⌋ + 1, the first N with N·Δt > T_copy (example 9.6: 3 over NVLink, 23 over
    the NIC); None when a batch saves nothing, so the copy never pays."""
    non_negative("payback", "copy_s", copy_s)
    if not math.isfinite(saving_per_batch_s):
        raise HarnessError(f"payback: saving_per_batch_s must be finite, got {saving_per_batch_s!r}.")
    if saving_per_batch_s <= 0:
        return None
    return math.floor(copy_s / saving_per_batch_s) + 1


def net_gain_s(batches: int, copy_s: float, saving_per_batch_s: float) -> float:
    """N·Δt - T_copy (example 9.6: 16 and 64 batches -> ≈3.2 and ≈14.8 ms over NVLink,
    ≈-1.5 and ≈10.1 ms over the NIC)."""
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
        raise HarnessError(f"net gain: batches must be an integer >= 0, got {batches!r}.")
    return batches * saving_per_batch_s - copy_s


def replica_memory_bytes(layers: int, replicas_per_layer: int, expert_bytes: float) -> float:
    """HBM per card for resident replicas: layers × replicas × W_e (§9.4.2: one 36 MiB expert in all
    94 layers = 3384 MiB ≈ 3.30 GiB, only the 8 hottest layers = 288 MiB)."""
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
        raise HarnessError(f"replica memory: layers must be an integer >= 0, got {layers!r}.")
    if isinstance(replicas_per_layer, bool) or not isinstance(replicas_per_layer, int) or replicas_per_layer < 0:
        raise HarnessError(f"replica memory: replicas_per_layer must be an integer >= 0, got {replicas_per_layer!r}.")
    positive("replica memory", "expert_bytes", expert_bytes)
    return layers * replicas_per_layer * expert_bytes


@dataclass(frozen=True, slots=True)
class PoolStability:
    """λ·E[F_j] < C_j per card and λ·E[V_l] < B_l per link: necessary, not sufficient (bursts still queue)."""

    batches_per_s: float
    card_utilisation: tuple[float, ...]  # λ·E[F_j]/C_j
    link_utilisation: tuple[float, ...]  # λ·E[V_l]/B_l
    stable: bool
    max_batches_per_s: float  # the λ at which the busiest card or link saturates

    def to_dict(self) -> dict:
        return asdict(self)


def pool_stability(
    batches_per_s: float,
    mean_flops_per_batch: Sequence[float],
    card_flops_per_s: Sequence[float],
    mean_link_bytes_per_batch: Sequence[float] = (),
    link_bandwidth_bytes_per_s: Sequence[float] = (),
) -> PoolStability:
    """§9.4.2: a shared expert pool fed λ batches/s stays stable only if every card and link keeps up."""
    non_negative("pool", "batches_per_s", batches_per_s)
    if len(mean_flops_per_batch) != len(card_flops_per_s) or not card_flops_per_s:
        raise HarnessError("pool: give one mean FLOPs per batch and one FLOP/s for every card (same length, at least one).")
    if len(mean_link_bytes_per_batch) != len(link_bandwidth_bytes_per_s):
        raise HarnessError("pool: give one mean byte count per batch and one bandwidth for every link (same length).")
    for i, (f, c) in enumerate(zip(mean_flops_per_batch, card_flops_per_s)):
        non_negative("pool", f"mean_flops_per_batch[{i}]", f)
        positive("pool", f"card_flops_per_s[{i}]", c)
    for i, (v, b) in enumerate(zip(mean_link_bytes_per_batch, link_bandwidth_bytes_per_s)):
        non_negative("pool", f"mean_link_bytes_per_batch[{i}]", v)
        positive("pool", f"link_bandwidth_bytes_per_s[{i}]", b)
    cards = tuple(batches_per_s * f / c for f, c in zip(mean_flops_per_batch, card_flops_per_s))
    links = tuple(batches_per_s * v / b for v, b in zip(mean_link_bytes_per_batch, link_bandwidth_bytes_per_s))
    per_batch = [f / c for f, c in zip(mean_flops_per_batch, card_flops_per_s)] + [
        v / b for v, b in zip(mean_link_bytes_per_batch, link_bandwidth_bytes_per_s)]
    worst = max(per_batch)
    return PoolStability(
        batches_per_s, cards, links, all(u < 1 for u in cards + links), math.inf if worst == 0 else 1.0 / worst,
    )
