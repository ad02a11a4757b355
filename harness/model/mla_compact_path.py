"""The MLA compact path on the D side: fewer KV bytes, but extra query-side FLOPs every step.

Chapter 9, §9.2.3 (after example 9.2) and footnote 7. Moving the up-projection to the query side
costs each request, at each layer, one query transform h×d_nope×d_c and one value recovery
h×d_c×d_v: 2·n_layers·h·d_c·(d_nope+d_v) FLOPs per step (DeepSeek-V3: 2,046,820,352 ≈ 2.05
GFLOPs). At H20's effective 74 TFLOP/s that is 27.7 µs per request-step, 28.3 ms over 1024 steps:
the H20 D pool goes from 0.878 to ≈0.907 GPU-s per request and from 4.55 to ≈4.41 req/s; four H20
stop keeping up with 3.5 req/s only above ≈258 µs per request-step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from harness.errors import HarnessError
from harness.model.capacity import PdAllocation, pd_search
from harness.specs._validate import non_negative, positive
from harness.specs.models import ModelSpec


def compact_path_flops_per_token(model: ModelSpec) -> float:
    """2·n_layers·h·d_c·(d_nope + d_v): absorbed query transform plus value recovery per decode token."""
    if model.attention != "mla":
        raise HarnessError(f"model {model.name!r} uses {model.attention!r} attention; the compact path needs an MLA model such as deepseek-v3.")
    return 2.0 * model.n_layers * model.n_heads * model.kv_lora_rank * (model.qk_nope_head_dim + model.v_head_dim)


@dataclass(frozen=True, slots=True)
class DPoolEffect:
    extra_flops_per_request_step: float
    extra_s_per_request_step: dict[str, float]  # per GPU type: extra FLOPs / effective FLOP/s
    extra_s_per_request: dict[str, float]  # × decode calls per request
    decode_s_per_request_before: dict[str, float]
    decode_s_per_request_after: dict[str, float]
    best_before: PdAllocation
    best_after: PdAllocation
    decode_pool_requests_per_s_before: float  # D pool of best_before
    decode_pool_requests_per_s_after: float  # same allocation with the extra work
    arrival_rate_per_s: float
    max_extra_s_per_request_step: float | None  # above this the D pool of best_before falls below λ

    def to_dict(self) -> dict:
        d = asdict(self)
        d["best_before"] = self.best_before.to_dict()
        d["best_after"] = self.best_after.to_dict()
        return d


def _d_pool_rate(decode: dict[str, int], d_s: dict[str, float], extra_s_per_step: float, calls: int) -> float:
    return sum(n / (d_s[g] + calls * extra_s_per_step) for g, n in decode.items() if n)


def compact_path_d_pool_effect(
    gpus: Sequence[str],
    counts: Sequence[int],
    prefill_s_per_request: Sequence[float],
    decode_s_per_request: Sequence[float],
    decode_calls_per_request: int,
    extra_flops_per_request_step: float,
    effective_flops_per_s: Sequence[float],
    arrival_rate_per_s: float,
    link_requests_per_s: float = math.inf,
) -> DPoolEffect:
    """d_D' = d_D + (G-1)·F_extra/C_eff per GPU type; best PD allocation before and after (pd_search);
    and the per-step extra time x at which Σ_D n/(d_D + (G-1)·x) = λ for the original D pool."""
    if not (len(gpus) == len(counts) == len(prefill_s_per_request) == len(decode_s_per_request) == len(effective_flops_per_s)):
        raise HarnessError("compact path: gpus, counts, stage times and effective FLOP/s need one entry per GPU type.")
    non_negative("compact path", "extra_flops_per_request_step", extra_flops_per_request_step)
    non_negative("compact path", "arrival_rate_per_s", arrival_rate_per_s)
    if isinstance(decode_calls_per_request, bool) or not isinstance(decode_calls_per_request, int) or decode_calls_per_request < 1:
        raise HarnessError(f"compact path: decode_calls_per_request must be an integer >= 1, got {decode_calls_per_request!r}.")
    for g, c in zip(gpus, effective_flops_per_s):
        positive("compact path", f"effective_flops_per_s[{g}]", c)
    step = {g: extra_flops_per_request_step / c for g, c in zip(gpus, effective_flops_per_s)}
    per_req = {g: decode_calls_per_request * s for g, s in step.items()}
    before = dict(zip(gpus, (float(x) for x in decode_s_per_request)))
    after = {g: before[g] + per_req[g] for g in gpus}
    s0 = pd_search(gpus, prefill_s_per_request, list(before.values()), counts, link_requests_per_s)
    s1 = pd_search(gpus, prefill_s_per_request, list(after.values()), counts, link_requests_per_s)
    dpool = s0.best.decode
    rate_after = sum(n / after[g] for g, n in dpool.items() if n)
    return DPoolEffect(
        extra_flops_per_request_step=extra_flops_per_request_step,
        extra_s_per_request_step=step,
        extra_s_per_request=per_req,
        decode_s_per_request_before=before,
        decode_s_per_request_after=after,
        best_before=s0.best,
        best_after=s1.best,
        decode_pool_requests_per_s_before=s0.best.decode_pool_requests_per_s,
        decode_pool_requests_per_s_after=rate_after,
        arrival_rate_per_s=arrival_rate_per_s,
        max_extra_s_per_request_step=_threshold(dpool, before, decode_calls_per_request, arrival_rate_per_s),
    )


def _threshold(dpool: dict[str, int], d_s: dict[str, float], calls: int, lam: float) -> float | None:
    """Largest x with Σ n/(d_D + calls·x) ≥ λ; None when the pool is already short (or λ = 0: no bound)."""
    if lam <= 0 or _d_pool_rate(dpool, d_s, 0.0, calls) < lam:
        return None
    if sum(1 for n in dpool.values() if n) == 1:  # closed form for one GPU type: (n/λ - d_D)/calls
        g, n = next((g, n) for g, n in dpool.items() if n)
        return (n / lam - d_s[g]) / calls
    lo, hi = 0.0, 1.0
    while _d_pool_rate(dpool, d_s, hi, calls) >= lam:
        hi *= 2
    for _ in range(200):  # the rate falls monotonically in x
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _d_pool_rate(dpool, d_s, mid, calls) >= lam else (lo, mid)
    return lo
