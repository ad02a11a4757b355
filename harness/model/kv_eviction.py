"""Queue-aware prefetch and eviction of KV states between host memory and SSD: a small deterministic
simulator comparing "evict the state whose next use is latest" with LRU and FIFO
(Chapter 9, §9.5.2, Fig. 9-35; CachedAttention, footnote 20)."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import non_negative_int, positive_int

Policy = Literal["queue-aware", "lru", "fifo"]
POLICIES: tuple[str, ...] = ("queue-aware", "lru", "fifo")
_OWNER = "eviction simulator"


@dataclass(frozen=True, slots=True)
class EvictionResult:
    policy: str
    host_slots: int
    ssd_slots: int | None  # None: unbounded
    lookahead: int | None  # queued requests the scheduler sees; None: the whole trace
    prefetch: bool
    requests: int
    reuse_requests: int  # requests whose session was served before (the ones a cache can hit)
    host_hits: int
    ssd_hits: int
    misses: int  # reuse requests whose state was gone: recompute
    hit_rate: float  # (host + SSD hits) / reuse requests
    host_hit_share: float  # host hits / all hits
    prefetches: int  # SSD -> host moves made while the request waited
    host_evictions: int  # host -> SSD demotions
    ssd_drops: int  # states dropped from a full SSD

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class _Tier:
    """Session -> (inserted clock, last-served step); exclusive of the other tier."""

    def __init__(self, slots: float) -> None:
        self.slots = slots
        self.items: dict[Hashable, tuple[int, int]] = {}

    def full(self) -> bool:
        return len(self.items) >= self.slots


def simulate_eviction(trace: Sequence[Hashable], host_slots: int, policy: str, ssd_slots: int | None = None,
                      lookahead: int | None = -1, prefetch: bool = True) -> EvictionResult:
    """Serve `trace` (session ids in service order) with `host_slots` host states and an SSD behind them.

    Each request reads its session's previous state: from host (host hit), from SSD (SSD hit, moved to host)
    or, if dropped, recomputes it (miss); afterwards the updated state sits in host. A full host demotes a
    victim to SSD; a full SSD drops one. Tiers are exclusive. Victims: LRU the least recently served, FIFO
    the earliest inserted, queue-aware the state whose next use among the `lookahead` queued requests is
    latest (never seen there = ∞, ties by LRU). Only the queue-aware policy prefetches: while request i runs,
    states of the queued requests i+1..i+W still on SSD move to host if a state with a later next use can make
    room (the chapter's condition: the queue wait covers the SSD read, ≥ 170 ms for 1.125 GiB).
    lookahead=-1 means host_slots − 1 (Fig. 9-35: one slot free for the incoming state, three for J2–J4);
    None means the whole trace (Belady's MIN when prefetch is off).
    """
    positive_int(_OWNER, "host_slots", host_slots)
    if ssd_slots is not None:
        non_negative_int(_OWNER, "ssd_slots", ssd_slots)
    if policy not in POLICIES:
        raise HarnessError(f"{_OWNER}: policy {policy!r} is unknown; known: {', '.join(POLICIES)}.")
    if lookahead == -1:
        lookahead = host_slots - 1
    elif lookahead is not None:
        non_negative_int(_OWNER, "lookahead", lookahead)
    queue_aware = policy == "queue-aware"
    n = len(trace)
    occ: dict[Hashable, list[int]] = {}
    for i, s in enumerate(trace):
        occ.setdefault(s, []).append(i)

    def next_use(s: Hashable, i: int) -> float:
        pos = occ[s]
        k = bisect.bisect_right(pos, i)
        if k == len(pos):
            return math.inf
        j = pos[k]
        return j if lookahead is None or j <= i + lookahead else math.inf

    def victim(tier: _Tier, i: int, exclude: Hashable) -> Hashable | None:
        cands = [s for s in tier.items if s != exclude]
        if not cands:
            return None
        if policy == "lru":
            return min(cands, key=lambda s: tier.items[s][1])
        if policy == "fifo":
            return min(cands, key=lambda s: tier.items[s][0])
        return max(cands, key=lambda s: (next_use(s, i), -tier.items[s][1]))

    host, ssd = _Tier(host_slots), _Tier(math.inf if ssd_slots is None else ssd_slots)
    clock = 0
    stats = {"host_hits": 0, "ssd_hits": 0, "misses": 0, "prefetches": 0, "host_evictions": 0, "ssd_drops": 0}
    seen: set[Hashable] = set()
    reuse = 0

    def demote(s: Hashable, i: int) -> None:
        nonlocal clock
        meta = host.items.pop(s)
        stats["host_evictions"] += 1
        if ssd.slots == 0:
            stats["ssd_drops"] += 1
            return
        if ssd.full():
            v = victim(ssd, i, None)
            del ssd.items[v]
            stats["ssd_drops"] += 1
        clock += 1
        ssd.items[s] = (clock, meta[1])

    for i, s in enumerate(trace):
        if queue_aware and prefetch:
            end = n - 1 if lookahead is None else min(n - 1, i + lookahead)
            for j in range(i + 1, end + 1):
                t = trace[j]
                if t not in ssd.items or t == s:
                    continue
                if host.full():
                    v = victim(host, i, s)
                    if v is None or next_use(v, i) <= j:
                        break  # everything left in host is needed no later than t
                    demote(v, i)
                clock += 1
                host.items[t] = (clock, ssd.items.pop(t)[1])
                stats["prefetches"] += 1
        if s in seen:
            reuse += 1
        if s in host.items:
            stats["host_hits"] += 1
            host.items[s] = (host.items[s][0], i)
            seen.add(s)
            continue
        if s in ssd.items:
            stats["ssd_hits"] += 1
            del ssd.items[s]
        elif s in seen:
            stats["misses"] += 1
        if host.full():
            demote(victim(host, i, s), i)
        clock += 1
        host.items[s] = (clock, i)
        seen.add(s)

    hits = stats["host_hits"] + stats["ssd_hits"]
    return EvictionResult(
        policy, host_slots, ssd_slots, lookahead, prefetch and queue_aware, n, reuse,
        stats["host_hits"], stats["ssd_hits"], stats["misses"],
        hits / reuse if reuse else 0.0, stats["host_hits"] / hits if hits else 0.0,
        stats["prefetches"], stats["host_evictions"], stats["ssd_drops"],
    )


def compare_policies(trace: Sequence[Hashable], host_slots: int, ssd_slots: int | None = None,
                     lookahead: int | None = -1) -> dict[str, EvictionResult]:
    """The three policies on the same trace and tiers."""
    return {p: simulate_eviction(trace, host_slots, p, ssd_slots, lookahead) for p in POLICIES}


def multi_turn_trace(sessions: int, turns_per_session: int, active_sessions: int, seed: int = 0) -> list[int]:
    """A deterministic multi-turn trace: `active_sessions` conversations open at a time, each turn from a
    uniformly chosen open one (random.Random(seed)); a finished conversation is replaced by the next."""
    positive_int(_OWNER, "sessions", sessions)
    positive_int(_OWNER, "turns_per_session", turns_per_session)
    positive_int(_OWNER, "active_sessions", active_sessions)
    if sessions * turns_per_session > 1_000_000:
        raise HarnessError(f"{_OWNER}: sessions × turns_per_session must be at most 1,000,000, got {sessions * turns_per_session}.")
    rng = random.Random(seed)
    left = {s: turns_per_session for s in range(sessions)}
    nxt = min(active_sessions, sessions)
    active = list(range(nxt))
    out: list[int] = []
    while active:
        k = rng.randrange(len(active))
        s = active[k]
        out.append(s)
        left[s] -= 1
        if left[s] == 0:
            if nxt < sessions:
                active[k] = nxt
                nxt += 1
            else:
                active.pop(k)
    return out
