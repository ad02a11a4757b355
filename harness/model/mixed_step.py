"""Chunked prefill from a measured mixed step: the prefill tokens one decode step hides, and the capacity bound they give.

Chapter 9, §9.2.3: a memory-bound decode step leaves compute idle; prefill tokens that fit in it
ride along for free (≈490 per A100 step, ≈85 per H20 step at 50 % of peak), and "the amount
actually hidden must be taken from the measured time of the mixed step". Chapter 19, §19.11
(SARATHI, vLLM chunked prefill) is the runtime technique. Two pieces:

hinge fit of a measured step time vs chunk size c (one decode step of batch B plus c prefill tokens):
    t(c) = t0 + s·max(0, c − h)
  t0 the decode step alone, h the hidden tokens, s the marginal seconds per prefill token beyond h.

capacity of one GPU serving whole requests with chunked prefill (L_new new tokens, G−1 decode
calls at batch B, decode step time t_D, prefill seconds per token τ = d_P/L_new):
    steps per request  n = (G−1)/B            hidden tokens per request  h·n
    seconds per request  T = n·t_D + max(0, L_new − h·n)·τ        μ = Σ_i n_i / T_i
  With the model's own h this is the ideal chunked bound (8×A100 4.54 req/s vs the chapter's 4.50,
  4 A100 + 4 H20 4.19 vs 4.17: the chapter's max(compute, memory) form also charges the prefill's
  weight reads; within 1 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

from harness.errors import HarnessError
from harness.model.stages import StageRates


@dataclass(frozen=True, slots=True)
class HingeFit:
    base_step_s: float  # t0: the decode step with no prefill chunk
    hidden_tokens: float  # h: chunk tokens that add no time
    per_token_s: float  # s: marginal seconds per prefill token beyond h
    rms_residual_s: float  # root-mean-square error of the fit
    points: int

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def fit_hinge(chunk_tokens: Sequence[float], step_s: Sequence[float]) -> HingeFit:
    """Least-squares fit of t(c) = t0 + s·max(0, c − h), t0 pinned to the c = 0 point.

    For each candidate h (every measured c and 200 points between 0 and the largest c) the best
    s ≥ 0 has a closed form; the h with the smallest squared error wins. The c = 0 point is
    required: it is the decode step alone, the reference the chapter's idle compute is measured against.
    """
    if len(chunk_tokens) != len(step_s):
        raise HarnessError(f"fit_hinge: {len(chunk_tokens)} chunk sizes but {len(step_s)} step times; give one time per chunk size.")
    pts = sorted(zip((float(c) for c in chunk_tokens), (float(t) for t in step_s)))
    if len(pts) < 3:
        raise HarnessError(f"fit_hinge: need at least 3 chunk sizes including 0, got {len(pts)}; add chunk sizes to the sweep.")
    for c, t in pts:
        if not (math.isfinite(c) and c >= 0 and math.isfinite(t) and t > 0):
            raise HarnessError(f"fit_hinge: chunk sizes must be >= 0 and step times > 0 s, got ({c!r}, {t!r}).")
    zeros = [t for c, t in pts if c == 0]
    if not zeros:
        raise HarnessError("fit_hinge: the sweep has no chunk size 0; the decode step alone is the reference, add c = 0.")
    t0 = sorted(zeros)[len(zeros) // 2]
    cmax = pts[-1][0]
    candidates = sorted({c for c, _ in pts} | {cmax * i / 200 for i in range(201)})
    best: tuple[float, float, float] | None = None
    for h in candidates:
        xs = [max(0.0, c - h) for c, _ in pts]
        sxx = sum(x * x for x in xs)
        sxy = sum(x * (t - t0) for x, (_, t) in zip(xs, pts))
        s = max(0.0, sxy / sxx) if sxx > 0 else 0.0
        sse = sum((t - t0 - s * x) ** 2 for x, (_, t) in zip(xs, pts))
        if best is None or sse < best[0] - 1e-18:
            best = (sse, h, s)
    assert best is not None
    sse, h, s = best
    if s == 0.0:
        h = cmax  # no chunk size added time: everything measured was hidden
    return HingeFit(t0, h, s, math.sqrt(sse / len(pts)), len(pts))


def chunked_s_per_request(decode_step_s: float, decode_batch: int, decode_calls: int, new_tokens: int,
                          prefill_s_per_token: float, hidden_tokens_per_step: float) -> float:
    """T = n·t_D + max(0, L_new − h·n)·τ with n = (G−1)/B decode steps per request (module docstring)."""
    for name, v in (("decode_step_s", decode_step_s), ("prefill_s_per_token", prefill_s_per_token)):
        if not (math.isfinite(v) and v > 0):
            raise HarnessError(f"chunked bound: {name} must be a positive number of seconds, got {v!r}.")
    if not (math.isfinite(hidden_tokens_per_step) and hidden_tokens_per_step >= 0):
        raise HarnessError(f"chunked bound: hidden_tokens_per_step must be >= 0, got {hidden_tokens_per_step!r}.")
    if decode_batch < 1 or decode_calls < 0 or new_tokens < 1:
        raise HarnessError(f"chunked bound: need decode_batch >= 1, decode_calls >= 0, new_tokens >= 1; got "
                           f"{decode_batch}, {decode_calls}, {new_tokens}.")
    n = decode_calls / decode_batch
    return n * decode_step_s + max(0.0, new_tokens - hidden_tokens_per_step * n) * prefill_s_per_token


def chunked_rate(rates: StageRates, hidden_tokens_per_step: float) -> float:
    """μ of one GPU (requests/s) with chunked prefill hiding `hidden_tokens_per_step` per decode step."""
    return 1.0 / chunked_s_per_request(
        rates.decode_step_s, rates.decode_step.batch, rates.decode_calls_per_request, rates.prefill.new_tokens,
        rates.prefill_s_per_request / rates.prefill.new_tokens, hidden_tokens_per_step,
    )


def chunked_colocated_rate_measured(rates: Sequence[StageRates], counts: Sequence[int], hidden_tokens_per_step: Sequence[float]) -> float:
    """μ = Σ_i n_i·μ_i with each GPU type's hidden tokens per step (measured, or the model's ideal)."""
    if not (len(rates) == len(counts) == len(hidden_tokens_per_step)):
        raise HarnessError("chunked bound: give one count and one hidden-token figure per GPU type.")
    return float(sum(n * chunked_rate(r, h) for r, n, h in zip(rates, counts, hidden_tokens_per_step)))
