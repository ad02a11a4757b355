"""KV state: bytes per token (GQA, MLA), transfer time α + V/B, and double-buffered memory.

Chapter 9, §9.2.2: V_KV = 2·n·L·h_kv·d_h·b for GQA and n·L·(d_c+d_r)·b for MLA; example 9.1.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.specs.models import ModelSpec


def kv_bytes_per_token(m: ModelSpec, kv_bytes_per_elem: float) -> float:
    """GQA: 2·n·h_kv·d_h·b (K and V). MLA: n·(d_c+d_r)·b (latent plus rope branch)."""
    if m.attention == "mla":
        return m.n_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * kv_bytes_per_elem
    return 2.0 * m.n_layers * m.n_kv_heads * m.head_dim * kv_bytes_per_elem


def kv_bytes(m: ModelSpec, tokens: float, kv_bytes_per_elem: float) -> float:
    return tokens * kv_bytes_per_token(m, kv_bytes_per_elem)


def transfer_time_s(payload_bytes: float, bandwidth_bytes_per_s: float, startup_latency_s: float = 0.0, transfers: int = 1) -> float:
    """T = transfers·α + V/B: a payload split into `transfers` launches over one link (§9.2.2, §9.3.4)."""
    if bandwidth_bytes_per_s <= 0:
        raise HarnessError(f"link bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s!r}.")
    return transfers * startup_latency_s + payload_bytes / bandwidth_bytes_per_s


def transfers_per_s(payload_bytes: float, bandwidth_bytes_per_s: float, startup_latency_s: float = 0.0) -> float:
    """Link term of μ_PD: how many whole states a link carries per second, 1/(α + V/B)."""
    return 1.0 / transfer_time_s(payload_bytes, bandwidth_bytes_per_s, startup_latency_s)


def link_demand_bytes_per_s(rate_per_s: float, payload_bytes: float) -> float:
    """Mean link load when `rate_per_s` states of `payload_bytes` cross it (§9.2.2: 8/s -> 9.7 GB/s)."""
    return rate_per_s * payload_bytes


def link_backlog_growth_bytes_per_s(rate_per_s: float, payload_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """Bytes per second piling up behind a link that cannot keep up (§9.2.2: 16/s on 100 GbE -> 6.8 GB/s)."""
    return max(0.0, rate_per_s * payload_bytes - bandwidth_bytes_per_s)


def kv_byte_seconds(state_bytes: float, seconds: float) -> float:
    """Memory occupancy × time of a parked state (§9.1.3: 1.125 GiB for 10 s -> 11.25 GiB·s)."""
    return state_bytes * seconds


@dataclass(frozen=True, slots=True)
class DoubleBufferMemory:
    source_bytes: float
    receiver_bytes: float
    total_bytes: float


def double_buffer_memory(state_bytes: float) -> DoubleBufferMemory:
    """During a whole-state transfer the source keeps the state and the receiver holds a full
    receive buffer (§9.2.2, Fig. 9-6: 1.125 GiB each side, 2.25 GiB in flight)."""
    return DoubleBufferMemory(state_bytes, state_bytes, 2.0 * state_bytes)
