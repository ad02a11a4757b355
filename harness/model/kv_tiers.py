"""KV storage tiers: fetch time per tier, KV production rate, retention, capacity for a reuse
interval and the SSD write budget (Chapter 9, §9.5.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from harness.errors import HarnessError
from harness.specs._validate import non_negative, positive, positive_int
from harness.specs.storage import SECONDS_PER_YEAR, SsdSpec, StorageTier

_OWNER = "KV tiers"


def serial_fetch_time_s(payload_bytes: float, hop_bandwidths_bytes_per_s: list[float] | tuple[float, ...], fixed_s: float = 0.0) -> float:
    """T = fixed + Σ V/B_i: a whole object moved hop by hop, each hop after the previous one
    (§9.5.2 Fig. 9-29, remote pool NIC then PCIe: 48.3 + 48.3 = 96.6 ms; §9.5.4 lookup 10 ms)."""
    non_negative(_OWNER, "payload_bytes", payload_bytes)
    non_negative(_OWNER, "fixed_s", fixed_s)
    for b in hop_bandwidths_bytes_per_s:
        positive(_OWNER, "hop bandwidth_bytes_per_s", b)
    return fixed_s + sum(payload_bytes / b for b in hop_bandwidths_bytes_per_s)


@dataclass(frozen=True, slots=True)
class TierFetch:
    tier: str
    capacity_bytes: float
    fetch_s: float
    recompute_s: float
    faster_than_recompute: bool
    retention_s: float  # C/r; inf for an unbounded pool
    prefixes_that_fit: int | None  # None for an unbounded pool

    def to_dict(self) -> dict:
        return {
            "tier": self.tier,
            "capacity_bytes": None if math.isinf(self.capacity_bytes) else self.capacity_bytes,
            "fetch_s": self.fetch_s,
            "recompute_s": self.recompute_s,
            "faster_than_recompute": self.faster_than_recompute,
            "retention_s": None if math.isinf(self.retention_s) else self.retention_s,
            "prefixes_that_fit": self.prefixes_that_fit,
        }


def kv_production_rate_bytes_per_s(state_bytes: float, prefill_s: float) -> float:
    """r = V / d_P: KV bytes one GPU creates while prefilling back to back with no hits
    (§9.5.2: 1.125 GiB every 0.856 s ≈ 1.41 GB/s on A100)."""
    non_negative(_OWNER, "state_bytes", state_bytes)
    positive(_OWNER, "prefill_s", prefill_s)
    return state_bytes / prefill_s


def retention_s(capacity_bytes: float, production_bytes_per_s: float) -> float:
    """C / r: how far back a tier written in FIFO order keeps new KV (§9.5.2: HBM ≈45 s, host ≈195 s, SSD ≈2722 s)."""
    positive(_OWNER, "production_bytes_per_s", production_bytes_per_s)
    if not capacity_bytes > 0:
        raise HarnessError(f"{_OWNER}: capacity_bytes must be > 0, got {capacity_bytes!r}.")
    return capacity_bytes / production_bytes_per_s


def capacity_for_interval_bytes(production_bytes_per_s: float, interval_s: float) -> float:
    """C ≥ r·T: capacity that keeps every state until its reuse T seconds later (§9.5.2: 10 s -> 14.1 GB, 10 min -> 846 GB)."""
    non_negative(_OWNER, "production_bytes_per_s", production_bytes_per_s)
    non_negative(_OWNER, "interval_s", interval_s)
    return production_bytes_per_s * interval_s


def prefixes_that_fit(capacity_bytes: float, state_bytes: float) -> int:
    """⌊C / V⌋ whole prefixes a tier can stage (§9.5.2: 256 GiB holds ≈227 prefixes of 8K)."""
    positive(_OWNER, "state_bytes", state_bytes)
    non_negative(_OWNER, "capacity_bytes", capacity_bytes)
    return math.floor(capacity_bytes / state_bytes)


def blocks_bytes(blocks: int, tokens_per_block: int, kv_bytes_per_token: float) -> float:
    """Bytes of `blocks` cache blocks (§9.5.2: 50 000 Mooncake blocks of 512 tokens of Qwen3-8B ≈ 3.77 TB)."""
    positive_int(_OWNER, "blocks", blocks)
    positive_int(_OWNER, "tokens_per_block", tokens_per_block)
    positive(_OWNER, "kv_bytes_per_token", kv_bytes_per_token)
    return blocks * tokens_per_block * kv_bytes_per_token


def tier_fetches(tiers: tuple[StorageTier, ...], state_bytes: float, recompute_s: float, production_bytes_per_s: float) -> list[TierFetch]:
    """Fetch time of one prefix from every tier against recompute (§9.5.2, Fig. 9-29: 0 / 48.3 / 170 / 96.6 ms vs 856 ms)."""
    out = []
    for t in tiers:
        f = serial_fetch_time_s(state_bytes, [h.bandwidth_bytes_per_s for h in t.fetch_hops])
        out.append(TierFetch(
            t.name, t.capacity_bytes, f, recompute_s, f < recompute_s,
            math.inf if math.isinf(t.capacity_bytes) else retention_s(t.capacity_bytes, production_bytes_per_s),
            None if math.isinf(t.capacity_bytes) else prefixes_that_fit(t.capacity_bytes, state_bytes),
        ))
    return out


@dataclass(frozen=True, slots=True)
class IntervalCapacity:
    interval_s: float
    capacity_bytes: float  # r·T
    tiers_needed: tuple[str, ...]  # nearest tiers whose capacity together reaches r·T; () if none does

    def to_dict(self) -> dict:
        return {"interval_s": self.interval_s, "capacity_bytes": self.capacity_bytes, "tiers_needed": list(self.tiers_needed)}


def interval_capacity(tiers: tuple[StorageTier, ...], production_bytes_per_s: float, interval_s: float) -> IntervalCapacity:
    """C = r·T and which tiers, nearest first, must be used together to hold it (§9.5.2, exercise 9-8)."""
    need = capacity_for_interval_bytes(production_bytes_per_s, interval_s)
    total, used = 0.0, []
    for t in tiers:
        used.append(t.name)
        total += t.capacity_bytes
        if total >= need:
            return IntervalCapacity(interval_s, need, tuple(used))
    return IntervalCapacity(interval_s, need, ())


@dataclass(frozen=True, slots=True)
class SsdWriteBudget:
    ssd: str
    kv_production_bytes_per_s: float  # r·(1 − prefix hit rate)
    prefix_hit_rate: float
    endurance_write_bytes_per_s: float  # capacity·DWPD/86 400
    overrun_factor: float  # r / endurance budget
    admissible_fraction: float  # min(1, budget / r): share of new KV the SSD can take for its rated life
    life_at_full_rate_s: float  # warranty years / overrun factor (if every new KV were written)
    ssd_write_bandwidth_share: float  # r / sequential write
    host_link_share: float | None  # r / host link bandwidth
    window_at_budget_s: float  # capacity / budget: how far back the SSD holds KV when writing at the budget

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def ssd_write_budget(ssd: SsdSpec, production_bytes_per_s: float, prefix_hit_rate: float = 0.0,
                     host_link_bytes_per_s: float | None = None) -> SsdWriteBudget:
    """SSD endurance bounds what KV may be written (§9.5.2).

    Budget = capacity·DWPD/86 400 s (3.84 TB, 1 DWPD: 44.4 MB/s); new KV r·(1−h); overrun r/budget
    (31.7×); admissible fraction budget/r (≈3.2 %, twice that at a 50 % prefix hit rate); at full
    rate the 5-year rating lasts 5 y / 31.7 (under two months).
    """
    positive(_OWNER, "production_bytes_per_s", production_bytes_per_s)
    if isinstance(prefix_hit_rate, bool) or not (0 <= prefix_hit_rate < 1):
        raise HarnessError(f"{_OWNER}: prefix_hit_rate must be in [0, 1), got {prefix_hit_rate!r}; at 1 no new KV is created.")
    r = production_bytes_per_s * (1.0 - prefix_hit_rate)
    budget = ssd.endurance_write_bytes_per_s
    overrun = r / budget
    return SsdWriteBudget(
        ssd.name, r, prefix_hit_rate, budget, overrun, min(1.0, budget / r),
        ssd.warranty_years * SECONDS_PER_YEAR / overrun if overrun > 1 else ssd.warranty_years * SECONDS_PER_YEAR,
        r / ssd.seq_write_bytes_per_s,
        None if host_link_bytes_per_s is None else r / host_link_bytes_per_s,
        ssd.capacity_bytes / budget,
    )
