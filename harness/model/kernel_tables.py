"""Measured kernel latencies as interpolation tables: GEMM by (M, N, K), attention by (batch, length), all-reduce by size.

The step model (harness.model.gpu_step) reads an operator's time from a table of kernel measurements when one
covers it, instead of a fitted efficiency: a GEMM's latency jumps where the kernel's tile choice changes (an
FP8 GEMM of M = 513 rows can take twice the time of M = 512 on an H200), which no single efficiency follows.
The tables hold what was measured (imported kernel data, e.g. aiconfigurator's per-operation database, or our
own microbenchmarks); this module only interpolates, in memory, with no I/O:

- inside the grid, multilinear interpolation of log(latency) over the log of each coordinate;
- below the smallest coordinate, the smallest measurement (a kernel does not get faster with less work);
- above the largest, the edge value scaled by the work ratio (latency grows linearly in M, N, K, batch and
  length once the device is full), so an extrapolated point is never faster than a measured one.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from harness.errors import HarnessError


def _axis_pos(axis: Sequence[float], x: float) -> tuple[int, int, float, float]:
    """(i0, i1, weight of i1, extrapolation factor) of `x` on a sorted axis, in log space."""
    n = len(axis)
    if n == 1 or x <= axis[0]:
        return 0, 0, 0.0, 1.0
    if x >= axis[-1]:
        return n - 1, n - 1, 0.0, x / axis[-1]
    j = bisect_right(axis, x)
    a, b = axis[j - 1], axis[j]
    w = (math.log(x) - math.log(a)) / (math.log(b) - math.log(a))
    return j - 1, j, w, 1.0


@dataclass(frozen=True)
class GridTable:
    """Latency (s) on a full grid of positive coordinates (axes sorted, values > 0; holes filled at build time)."""

    axes: tuple[tuple[float, ...], ...]
    log_latency: np.ndarray  # shape = tuple(len(a) for a in axes)
    extrapolate: tuple[bool, ...] = ()  # per axis: scale by x / max above the grid (default True)

    def __post_init__(self) -> None:
        if self.log_latency.shape != tuple(len(a) for a in self.axes):
            raise HarnessError("kernel table: the latency grid's shape does not match its axes.")
        if not np.all(np.isfinite(self.log_latency)):
            raise HarnessError("kernel table: the latency grid has holes; fill them before building the table.")

    def time_s(self, *coords: float) -> float:
        if len(coords) != len(self.axes):
            raise HarnessError(f"kernel table: {len(self.axes)} coordinates expected, got {len(coords)}.")
        pos = [_axis_pos(a, float(x)) for a, x in zip(self.axes, coords)]
        scale = 1.0
        for d, (_, _, _, f) in enumerate(pos):
            if f != 1.0 and (not self.extrapolate or self.extrapolate[d]):
                scale *= f
        acc = 0.0
        for corner in range(1 << len(pos)):
            w = 1.0
            idx = []
            for d, (i0, i1, wd, _) in enumerate(pos):
                if corner >> d & 1:
                    if wd == 0.0:
                        w = 0.0
                        break
                    w *= wd
                    idx.append(i1)
                else:
                    w *= 1.0 - wd
                    idx.append(i0)
            if w:
                acc += w * float(self.log_latency[tuple(idx)])
        return math.exp(acc) * scale


def grid_from_points(coords: np.ndarray, latency_s: np.ndarray, what: str, extrapolate: tuple[bool, ...] = ()) -> GridTable:
    """A GridTable from scattered measurements on a (near-)full grid: `coords` is (points, dims), `latency_s` (points,).
    Repeated points are averaged in log space (a geometric mean); holes are filled from the nearest measured neighbour
    along the first axis, then the others."""
    coords = np.asarray(coords, dtype=float)
    lat = np.asarray(latency_s, dtype=float)
    ok = np.isfinite(lat) & (lat > 0) & np.all(coords > 0, axis=1)
    coords, lat = coords[ok], lat[ok]
    if not len(lat):
        raise HarnessError(f"kernel table {what}: no positive finite latency.")
    axes, inverse = [], []
    for d in range(coords.shape[1]):
        u, inv = np.unique(coords[:, d], return_inverse=True)
        axes.append(tuple(float(x) for x in u))
        inverse.append(inv)
    shape = tuple(len(a) for a in axes)
    flat = np.ravel_multi_index(tuple(inverse), shape)
    sums = np.bincount(flat, weights=np.log(lat), minlength=int(np.prod(shape)))
    counts = np.bincount(flat, minlength=int(np.prod(shape)))
    with np.errstate(invalid="ignore", divide="ignore"):
        grid = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan).reshape(shape)
    for d in range(len(shape)):
        if not np.isnan(grid).any():
            break
        grid = _fill_along(grid, d)
    if np.isnan(grid).any():  # a whole slice unmeasured: the mean of what was measured
        grid = np.where(np.isnan(grid), np.nanmean(grid), grid)
    return GridTable(tuple(axes), grid, extrapolate)


def _fill_along(grid: np.ndarray, axis: int) -> np.ndarray:
    g = np.moveaxis(grid.copy(), axis, 0)
    n = g.shape[0]
    for i in range(n):
        hole = np.isnan(g[i])
        if not hole.any():
            continue
        for dist in range(1, n):
            for j in (i - dist, i + dist):
                if 0 <= j < n:
                    fill = hole & ~np.isnan(g[j])
                    g[i][fill] = g[j][fill]
                    hole &= ~fill
            if not hole.any():
                break
    return np.moveaxis(g, 0, axis)


@dataclass(frozen=True)
class AttentionKey:
    """The shape an attention table was measured at, per card: query heads, KV heads, head dim, KV dtype, window."""

    heads: int
    kv_heads: int
    head_dim: int
    kv_dtype: str
    window: int = 0


@dataclass(frozen=True)
class MoeKey:
    """The routed-expert layer a MoE table was measured at, per instance: kernel dtype, hidden and expert widths, top-k,
    experts, and how they are spread (moe_tp × ep)."""

    dtype: str
    hidden: int
    inter: int
    topk: int
    experts: int
    moe_tp: int
    ep: int


@dataclass(frozen=True)
class KernelTables:
    """One GPU's (and one engine's) measured kernels, ready to interpolate.

    gemm: by GEMM kernel family ("bf16", "fp8", "fp8-block") a table over (M, N, K); decode_attention: per
    AttentionKey a table over (batch, context tokens); prefill_attention: per AttentionKey over (batch, prompt
    tokens); allreduce: per card count a table over message bytes. `smallest_kernel_s` is the latency of the
    smallest measured kernel (an empty GEMM): the step model's cost of one element-wise kernel."""

    gpu: str
    source: str
    gemm: Mapping[str, GridTable] = field(default_factory=dict)
    decode_attention: Mapping[AttentionKey, GridTable] = field(default_factory=dict)
    prefill_attention: Mapping[AttentionKey, GridTable] = field(default_factory=dict)
    allreduce: Mapping[int, GridTable] = field(default_factory=dict)
    moe: Mapping[MoeKey, GridTable] = field(default_factory=dict)  # one MoE layer's routed experts over tokens
    mla_decode: Mapping[int, GridTable] = field(default_factory=dict)  # MLA core attention by heads per card: (batch, context)
    mla_prefill: Mapping[int, GridTable] = field(default_factory=dict)  # by heads per card: (batch, prompt)
    smallest_kernel_s: float | None = None
    notes: tuple[str, ...] = ()
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # (op, coordinates) -> seconds

    def gemm_s(self, kernel: str, m: float, n: float, k: float) -> float | None:
        key = ("gemm", kernel, m, n, k)
        hit = self._memo.get(key)
        if hit is not None or key in self._memo:
            return hit
        t = self.gemm.get(kernel)
        out = None if t is None else t.time_s(m, n, k)
        self._memo[key] = out
        return out

    def attention_s(self, phase: str, key: AttentionKey, batch: float, tokens: float) -> float | None:
        """Latency of one layer's attention for `batch` sequences of `tokens` (decode: context; prefill: prompt), at
        the measured shape nearest `key`: same head dim and KV dtype, window; heads scaled linearly from the nearest."""
        memo_key = ("attn", phase, key, round(batch, 3), round(tokens, 1))
        if memo_key in self._memo:
            return self._memo[memo_key]
        out = self._attention_s(phase, key, batch, tokens)
        self._memo[memo_key] = out
        return out

    def _attention_s(self, phase: str, key: AttentionKey, batch: float, tokens: float) -> float | None:
        tables = self.decode_attention if phase == "decode" else self.prefill_attention
        near = ("near", phase, key)
        if near not in self._memo:
            self._memo[near] = _nearest_key(tables, key)
        best = self._memo[near]
        if best is None:
            return None
        scale = (key.heads / best.heads) if best.heads != key.heads else 1.0
        if phase == "decode" and best.kv_heads != key.kv_heads:
            scale = max(scale, key.kv_heads / best.kv_heads)
        return tables[best].time_s(max(1.0, batch), max(1.0, tokens)) * scale

    def moe_s(self, key: MoeKey, tokens: float) -> float | None:
        """One MoE layer's routed experts for `tokens` tokens (uniform routing), at exactly the measured shape."""
        t = self.moe.get(key)
        return None if t is None else t.time_s(max(1.0, tokens))

    def mla_s(self, phase: str, heads: int, batch: float, tokens: float) -> float | None:
        """One layer's MLA core attention (decode: over `tokens` of context; prefill: a `tokens` prompt) with `heads`
        query heads on the card; the nearest measured head count, scaled linearly."""
        tables = self.mla_decode if phase == "decode" else self.mla_prefill
        if not tables:
            return None
        near = min(tables, key=lambda h: abs(math.log(h / heads)))
        return tables[near].time_s(max(1.0, batch), max(1.0, tokens)) * heads / near

    def allreduce_s(self, cards: int, payload_bytes: float) -> float | None:
        key = ("ar", cards, payload_bytes)
        if key in self._memo:
            return self._memo[key]
        t = self.allreduce.get(cards)
        out = None if t is None else t.time_s(max(1.0, payload_bytes))
        self._memo[key] = out
        return out


def _nearest_key(tables: Mapping[AttentionKey, GridTable], key: AttentionKey) -> AttentionKey | None:
    cands = [k for k in tables if k.head_dim == key.head_dim and k.kv_dtype == key.kv_dtype and k.window == key.window]
    if not cands:
        cands = [k for k in tables if k.head_dim == key.head_dim and k.kv_dtype == key.kv_dtype]
    if not cands:
        return None
    return min(cands, key=lambda k: (abs(math.log(k.kv_heads / key.kv_heads)), abs(math.log(k.heads / key.heads))))
