"""Keep, fetch or recompute a context state: the reuse inequality, its critical bandwidth and the
three ways to use a shared state k times (Chapter 9, §9.5.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from harness.errors import HarnessError
from harness.model.kv import kv_byte_seconds
from harness.specs._validate import non_negative, positive, positive_int

_OWNER = "KV reuse"


def _dict(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


@dataclass(frozen=True, slots=True)
class KeepDecision:
    uses: int  # k future uses
    write_s: float
    read_s: float
    recompute_s: float
    keep_s: float  # T_write + k·T_read
    recompute_total_s: float  # k·T_recompute
    keep_wins: bool
    min_uses_to_keep: int | None  # smallest k with keep faster; None when a read is not faster than recompute

    def to_dict(self) -> dict:
        return _dict(self)


def min_uses_to_keep(write_s: float, read_s: float, recompute_s: float) -> int | None:
    """Smallest integer k ≥ 1 with T_write + k·T_read < k·T_recompute, i.e. k > T_write/(T_recompute − T_read);
    None when T_read ≥ T_recompute (every reuse loses more) (§9.5.2)."""
    non_negative(_OWNER, "write_s", write_s)
    non_negative(_OWNER, "read_s", read_s)
    positive(_OWNER, "recompute_s", recompute_s)
    gain = recompute_s - read_s
    if gain <= 0:
        return None
    return max(1, math.floor(write_s / gain) + 1)


def keep_or_recompute(write_s: float, read_s: float, recompute_s: float, uses: int = 1) -> KeepDecision:
    """T_write + k·T_read < k·T_recompute (§9.5.2: 48.3 + 48.3 = 96.6 ms < 856 ms at k = 1 over 25 GB/s)."""
    positive_int(_OWNER, "uses", uses)
    keep = write_s + uses * read_s
    rec = uses * recompute_s
    return KeepDecision(uses, write_s, read_s, recompute_s, keep, rec, keep < rec, min_uses_to_keep(write_s, read_s, recompute_s))


def critical_bandwidth_bytes_per_s(state_bytes: float, recompute_s: float, uses: int | None = None) -> float:
    """Link bandwidth B above which keeping pays when writes and reads share B.

    uses=None (k -> ∞, a fetch alone): B > V/T_recompute = r, the KV production rate (1.41 GB/s).
    k uses: (1 + k)·V/B < k·V/r  ⇔  B > r·(k + 1)/k (k = 1: 2r = 2.82 GB/s) (§9.5.2).
    """
    positive(_OWNER, "state_bytes", state_bytes)
    positive(_OWNER, "recompute_s", recompute_s)
    r = state_bytes / recompute_s
    if uses is None:
        return r
    positive_int(_OWNER, "uses", uses)
    return r * (uses + 1) / uses


@dataclass(frozen=True, slots=True)
class UsageMode:
    mode: str  # "recompute-once-and-keep" | "fetch-once-and-keep" | "remote-read-per-step"
    uses: int
    link_bytes: float  # bytes that cross the link for all k uses
    link_busy_s: float  # link occupancy: link_bytes / B
    compute_s: float  # GPU time spent rebuilding the state
    bandwidth_to_finish_bytes_per_s: float | None  # link_bytes / deadline
    link_oversubscription: float | None  # that bandwidth / B
    resident_byte_seconds: float  # V·τ held locally while the k uses run

    def to_dict(self) -> dict:
        return _dict(self)


def usage_modes(state_bytes: float, uses: int, link_bytes_per_s: float, recompute_s: float,
                deadline_s: float | None = None, resident_s: float = 0.0) -> list[UsageMode]:
    """The three ways to use a shared state for k decode steps (§9.5.2).

    Recompute once and keep: T_recompute of GPU time, no link bytes. Fetch once and keep: V on the
    link once. Remote read per step: k·V on the link (1.125 GiB × 100 over 25 GB/s = 4.83 s busy;
    121 GB/s to finish in 1 s, 4.8× the link). The local modes hold V for τ: V·τ byte-seconds.
    """
    positive(_OWNER, "state_bytes", state_bytes)
    positive_int(_OWNER, "uses", uses)
    positive(_OWNER, "link_bytes_per_s", link_bytes_per_s)
    positive(_OWNER, "recompute_s", recompute_s)
    if deadline_s is not None:
        positive(_OWNER, "deadline_s", deadline_s)
    non_negative(_OWNER, "resident_s", resident_s)

    def mode(name: str, nbytes: float, compute: float, resident: float) -> UsageMode:
        need = None if deadline_s is None else nbytes / deadline_s
        return UsageMode(name, uses, nbytes, nbytes / link_bytes_per_s, compute, need,
                         None if need is None else need / link_bytes_per_s, kv_byte_seconds(state_bytes, resident))

    return [
        mode("recompute-once-and-keep", 0.0, recompute_s, resident_s),
        mode("fetch-once-and-keep", state_bytes, 0.0, resident_s),
        mode("remote-read-per-step", uses * state_bytes, 0.0, 0.0),
    ]


@dataclass(frozen=True, slots=True)
class CriticalBandwidth:
    uses: int
    critical_bandwidth_bytes_per_s: float


def reuse_band(state_bytes: float, recompute_s: float, max_uses: int) -> list[CriticalBandwidth]:
    """Critical bandwidth for k = 1..max_uses (the 1.41–2.82 GB/s band of §9.5.2: between them k ≥ 2 is needed)."""
    positive_int(_OWNER, "max_uses", max_uses)
    if max_uses > 10_000:
        raise HarnessError(f"{_OWNER}: max_uses must be at most 10000, got {max_uses!r}.")
    return [CriticalBandwidth(k, critical_bandwidth_bytes_per_s(state_bytes, recompute_s, k)) for k in range(1, max_uses + 1)]
