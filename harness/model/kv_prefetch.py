"""Layer-wise prefetch of a cached prefix: read-then-compute vs per-layer prefetch vs pre-loaded
layers, the prefetch buffer and the new-token count at which compute hides the read
(Chapter 9, §9.5.2, Fig. 9-32 – 9-34, CachedAttention)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal

from harness.errors import HarnessError
from harness.specs._validate import non_negative, non_negative_int, positive, positive_int

_OWNER = "layer-wise prefetch"


@dataclass(frozen=True, slots=True)
class PrefetchTimeline:
    strategy: Literal["read-then-compute", "per-layer", "pre-loaded"]
    layers: int
    preloaded_layers: int
    read_per_layer_s: float
    compute_per_layer_s: float
    total_s: float  # from the start of the request to the end of the last layer
    bound: Literal["read", "compute"]

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check(layers: int, read_s: float, compute_s: float, preloaded: int) -> None:
    positive_int(_OWNER, "layers", layers)
    non_negative(_OWNER, "read_s", read_s)
    non_negative(_OWNER, "compute_s", compute_s)
    non_negative_int(_OWNER, "preloaded_layers", preloaded)
    if preloaded > layers:
        raise HarnessError(f"{_OWNER}: preloaded_layers ({preloaded}) exceeds layers ({layers}).")


def read_then_compute(layers: int, read_s: float, compute_s: float) -> PrefetchTimeline:
    """Read the whole history, then compute: T_read + T_new (Fig. 9-32: 48.3 + 30.9 = 79.2 ms)."""
    _check(layers, read_s, compute_s, 0)
    return PrefetchTimeline("read-then-compute", layers, 0, read_s / layers, compute_s / layers, read_s + compute_s,
                            "read" if read_s >= compute_s else "compute")


def layer_pipeline(layers: int, read_s: float, compute_s: float, preloaded_layers: int = 0) -> PrefetchTimeline:
    """Per-layer prefetch, simulated layer by layer: layers p..n−1 are read one after another from t = 0,
    layer i computes once it is read and layer i−1 is done (end_i = max(end_{i−1}, ready_i) + c).
    With p = 0 this is Fig. 9-33 (36·1.34 + 0.857 ≈ 49.2 ms, read-bound); with p = 14 Fig. 9-34
    (30.9 ms, the compute time alone)."""
    _check(layers, read_s, compute_s, preloaded_layers)
    a, c = read_s / layers, compute_s / layers
    end = 0.0
    for i in range(layers):
        ready = 0.0 if i < preloaded_layers else (i - preloaded_layers + 1) * a
        end = max(end, ready) + c
    bound = "compute" if math.isclose(end, compute_s, rel_tol=1e-9, abs_tol=1e-15) else "read"
    return PrefetchTimeline("pre-loaded" if preloaded_layers else "per-layer", layers, preloaded_layers, a, c, end, bound)


def prefetch_buffer_bytes(link_bytes_per_s: float, read_s: float, compute_s: float) -> float:
    """S_buf = B·(T_read − T_new), 0 when compute already hides the read (§9.5.2: 25 GB/s × (48.3 − 30.9) ms ≈ 437 MB)."""
    positive(_OWNER, "link_bytes_per_s", link_bytes_per_s)
    return link_bytes_per_s * max(0.0, read_s - compute_s)


def layers_to_preload(buffer_bytes: float, layer_bytes: float) -> int:
    """⌈S_buf / per-layer KV⌉ (§9.5.2: 437 MB / 32 MiB ≈ 13.03 -> 14 layers, 448 MiB)."""
    non_negative(_OWNER, "buffer_bytes", buffer_bytes)
    positive(_OWNER, "layer_bytes", layer_bytes)
    return math.ceil(buffer_bytes / layer_bytes - 1e-12)


def min_preloaded_layers(layers: int, read_s: float, compute_s: float) -> int:
    """Smallest p for which the simulated pipeline finishes in the compute time alone (cross-checks ⌈S_buf/layer⌉)."""
    _check(layers, read_s, compute_s, 0)
    for p in range(layers + 1):
        if layer_pipeline(layers, read_s, compute_s, p).bound == "compute":
            return p
    return layers  # pragma: no cover - p = layers always leaves only compute


def layers_that_hide_the_read(layers: int, read_s: float, compute_s: float, closed_form_layers: int) -> int:
    """The pre-loaded layer count to use: the closed formula ⌈S_buf/layer⌉ when the simulated pipeline with
    that many layers ends at T_new, else the simulated minimum. The two differ because the last layer's
    compute cannot overlap its own read (§9.5.2, Fig. 9-33 / 9-34; issue 18: 8 by the formula, 9 simulated)."""
    closed = min(closed_form_layers, layers)
    if layer_pipeline(layers, read_s, compute_s, closed).bound == "compute":
        return closed
    return min_preloaded_layers(layers, read_s, compute_s)


def hiding_new_tokens(read_s: float, compute_s_for_new_tokens: Callable[[int], float], max_tokens: int = 1 << 20) -> int | None:
    """Smallest new-token count n with T_new(n) ≥ T_read: from there per-layer prefetch hides the read
    entirely and no buffer is needed (§9.5.2: ≈400 host, ≈800 remote pool, ≈1400 local SSD on A100).
    T_new must grow with n (a prefill does); binary search over [1, max_tokens]; None if not reached."""
    non_negative(_OWNER, "read_s", read_s)
    positive_int(_OWNER, "max_tokens", max_tokens)
    if compute_s_for_new_tokens(max_tokens) < read_s:
        return None
    lo, hi = 1, max_tokens
    while lo < hi:
        mid = (lo + hi) // 2
        if compute_s_for_new_tokens(mid) >= read_s:
            hi = mid
        else:
            lo = mid + 1
    return lo
