"""P→D hand-off of the context state: one direct transfer vs write-then-read through a shared pool,
and when later reuse from the pool pays for the extra hop (Chapter 9, §9.7.1, Fig. 9-45/9-46)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from harness.specs._validate import non_negative, non_negative_int, positive

_OWNER = "KV hand-off"


@dataclass(frozen=True, slots=True)
class HandoffComparison:
    state_bytes: float
    direct_s: float  # V / B_direct, one transfer
    pooled_s: float  # V / B_write + V / B_read: the read starts after the whole object is written
    extra_hop_s: float  # pooled − direct
    direct_link_bytes: float  # V
    pooled_link_bytes: float  # 2V
    later_reuses: int  # other instances that later continue the session from the pool
    recompute_s: float  # what each later reuse would otherwise recompute
    saving_per_reuse_s: float  # T_recompute − T_read
    net_saving_s: float  # reuses × saving − extra hop
    pool_pays: bool

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def handoff_comparison(state_bytes: float, direct_bytes_per_s: float, pool_write_bytes_per_s: float,
                       pool_read_bytes_per_s: float, recompute_s: float, later_reuses: int = 1) -> HandoffComparison:
    """Direct: V/B (1.125 GiB over 25 GB/s = 48.3 ms). Pooled: V/B_w + V/B_r = 96.6 ms, 48.3 ms more and
    2.25 GiB on the links. Each later reuse reads 48.3 ms instead of recomputing 856 ms, so one reuse nets
    856 − 48.3 − 48.3 ≈ 760 ms; with no reuse the pool only costs the extra hop (§9.7.1)."""
    positive(_OWNER, "state_bytes", state_bytes)
    positive(_OWNER, "direct_bytes_per_s", direct_bytes_per_s)
    positive(_OWNER, "pool_write_bytes_per_s", pool_write_bytes_per_s)
    positive(_OWNER, "pool_read_bytes_per_s", pool_read_bytes_per_s)
    non_negative(_OWNER, "recompute_s", recompute_s)
    non_negative_int(_OWNER, "later_reuses", later_reuses)
    direct = state_bytes / direct_bytes_per_s
    read = state_bytes / pool_read_bytes_per_s
    pooled = state_bytes / pool_write_bytes_per_s + read
    extra = pooled - direct
    saving = recompute_s - read
    net = later_reuses * saving - extra
    return HandoffComparison(state_bytes, direct, pooled, extra, state_bytes, 2 * state_bytes, later_reuses,
                             recompute_s, saving, net, net > 0)
