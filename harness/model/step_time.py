"""Step time of one engine forward pass: the chapter's roofline and the calibrated overlap form.

Chapter mode (Chapter 9, §9.2.3; harness.model.stages): a stage takes
max(F / (η_c·peak), W / (η_b·bandwidth)) — compute and memory overlap perfectly and the
larger term wins. That mode is unchanged; its numbers are pinned by the chapter's tests.

Calibrated mode (a stated deviation, docs/model.md "Calibrated step time"): the same FLOP and
byte counts (harness.model.forward: linear layers, exact causal attention, logits; weights
streamed once per step plus the KV cache read), combined as

    t(step) = α + ((W · s_byte)^p + (F · s_flop)^p)^(1/p) + A · s_attn

with A the step's attention FLOPs (decode: batch × context × the per-pair FLOPs × layers; already inside F,
so s_attn is what the attention costs beyond its share of the roofline terms: 0 where it runs at the
linear layers' rate),

with α the fixed cost of a step (graph build, thread barriers, sampling; seconds), s_byte the
seconds per byte streamed (1 / effective bandwidth), s_flop the seconds per FLOP (1 / effective
compute rate) and p ≥ 1 the overlap of the two terms: p = 1 is their sum (no overlap: on a CPU the
same threads stream the weights and do the arithmetic), p → ∞ the chapter's max(). All are fitted
per phase from the engine's own measurements (harness.calibration.step_time). Where the two terms
are close (decode at batch 4 on a 2-core host: 23 ms compute, 29 ms memory) the chapter's max() is
1.3× optimistic (docs/loop-cpu.md); when one term dominates every p gives about the same time.
The attention term is fitted for decode only: llama.cpp's CPU attention (per-head small matrix
products and a softmax, no flash attention) made a 50M-parameter model's decode step grow 3.8 ms from
context 40 to 520 at batch 1 where its bytes at the fitted bandwidth are 0.13 ms (docs/model.md).

This module is the pure formula: work counts in, seconds out. Fitting and intervals live in
harness.calibration.step_time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.model.forward import decode_step_work, prefill_work
from harness.specs.models import ModelSpec

FORM = ("t = alpha_s + ((bytes * s_per_byte)^p + (flops * s_per_flop)^p)^(1/p) + attention_flops * s_per_attn_flop; "
        "p = 1: no overlap of the compute and memory terms (their sum), p -> infinity: perfect overlap (the chapter's max); "
        "s_per_attn_flop: the attention's cost beyond its share of flops (decode only; 0 in files of format_version 1)")
P_MAX = 16.0  # the largest overlap exponent fitted: within 4.4 % of max() when the two terms are equal (2^(1/16))


@dataclass(frozen=True, slots=True)
class StepConstants:
    """α, s_byte, s_flop, s_attn of the calibrated form; each >= 0 (a term the data could not resolve is 0)."""

    alpha_s: float
    s_per_byte: float
    s_per_flop: float
    overlap_p: float = 1.0  # 1: t = α + memory + compute; larger: the terms overlap, → max() as p → ∞
    s_per_attn_flop: float = 0.0  # seconds per attention FLOP beyond its share of s_per_flop (decode)

    def __post_init__(self) -> None:
        for f in ("alpha_s", "s_per_byte", "s_per_flop", "s_per_attn_flop"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise HarnessError(f"step-time constant {f} must be a finite number >= 0, got {v!r}; refit the calibration.")
        p = self.overlap_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (1.0 <= p <= P_MAX):
            raise HarnessError(f"step-time constant overlap_p must be in [1, {P_MAX:g}], got {p!r}; refit the calibration.")

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        """1 / s_byte, the effective bandwidth (None when the memory term was not resolved)."""
        return 1.0 / self.s_per_byte if self.s_per_byte > 0 else None

    @property
    def compute_flops_per_s(self) -> float | None:
        return 1.0 / self.s_per_flop if self.s_per_flop > 0 else None

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.alpha_s, self.s_per_byte, self.s_per_flop)


@dataclass(frozen=True, slots=True)
class StepWork:
    """FLOPs and bytes of one step, as harness.model.forward counts them (Chapter 9, §9.2.3); `attn_flops` the
    attention's share of `flops` (the decode step's; 0 where the form has no attention term)."""

    flops: float
    bytes: float
    attn_flops: float = 0.0


def combine(memory_s, compute_s, p: float):
    """(m^p + c^p)^(1/p): the sum at p = 1, → max(m, c) as p grows (numpy arrays or floats)."""
    if p == 1.0:
        return memory_s + compute_s
    import numpy as np  # noqa: PLC0415

    m, c = np.asarray(memory_s, dtype=float), np.asarray(compute_s, dtype=float)
    hi = np.maximum(m, c)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = hi * ((m / np.where(hi > 0, hi, 1)) ** p + (c / np.where(hi > 0, hi, 1)) ** p) ** (1.0 / p)
    out = np.where(hi > 0, out, 0.0)
    return float(out) if out.ndim == 0 else out


def calibrated_step_s(c: StepConstants, work: StepWork) -> float:
    """t = α + ((W·s_byte)^p + (F·s_flop)^p)^(1/p) + A·s_attn; with p = 1, α + W·s_byte + F·s_flop + A·s_attn."""
    return (c.alpha_s + combine(work.bytes * c.s_per_byte, work.flops * c.s_per_flop, c.overlap_p)
            + work.attn_flops * c.s_per_attn_flop)


def chapter_step_s(work: StepWork, compute_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The chapter's max(F / C, W / B) with effective constants (§9.2.3), for comparison."""
    return max(work.flops / compute_flops_per_s, work.bytes / bandwidth_bytes_per_s)


def prefill_step_work(m: ModelSpec, prompt_tokens: int, cached_tokens: int = 0, *, weight_bytes_per_param: float,
                      kv_bytes_per_elem: float = 2.0) -> StepWork:
    """Work of prefilling `prompt_tokens` new tokens after `cached_tokens` cached ones (one sequence)."""
    w = prefill_work(m, prompt_tokens, cached_tokens, weight_bytes_per_param, kv_bytes_per_elem)
    return StepWork(w.flops, w.bytes)


def decode_step_work_counts(m: ModelSpec, batch: int, context_tokens: float, *, weight_bytes_per_param: float,
                            kv_bytes_per_elem: float = 2.0) -> StepWork:
    """Work of one decode step: `batch` sequences, each attending `context_tokens` keys."""
    if context_tokens < 0:
        raise HarnessError(f"decode context_tokens must be >= 0, got {context_tokens!r}.")
    w = decode_step_work(m, batch, context_tokens, weight_bytes_per_param, kv_bytes_per_elem)
    return StepWork(w.flops, w.bytes, w.attn_flops)


def prefill_chunks_work(m: ModelSpec, prompt_tokens: int, cached_tokens: int = 0, *, ubatch: int,
                        weight_bytes_per_param: float, kv_bytes_per_elem: float = 2.0) -> tuple[StepWork, ...]:
    """A prompt processed in forward passes of at most `ubatch` tokens (llama.cpp's -ub, a chunked prefill):
    each pass streams the weights once and attends to everything before it."""
    if ubatch < 1:
        raise HarnessError(f"ubatch must be an integer >= 1, got {ubatch!r}.")
    if prompt_tokens < 1:
        raise HarnessError(f"prompt_tokens must be >= 1, got {prompt_tokens!r}.")
    out = []
    done = 0
    while done < prompt_tokens:
        n = min(ubatch, prompt_tokens - done)
        out.append(prefill_step_work(m, n, cached_tokens + done, weight_bytes_per_param=weight_bytes_per_param,
                                     kv_bytes_per_elem=kv_bytes_per_elem))
        done += n
    return tuple(out)
