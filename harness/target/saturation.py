"""Throughput at saturation, one estimator for the twin and the measurement alike.

The window is the stretch between the 20th and the 80th percentile completion instant of a backlog that keeps every
slot busy; the rate is the output tokens emitted inside that window divided by its length, and requests/s is that
over the mean output length. Counting completions instead (the first version) is biased when completions come in
waves: a burst into four idle slots finishes its requests four at a time, and a window opening on a wave counts that
wave's other three, which overstated a 24-request burst's rate by a quarter in the twin (found 2026-12-01). Tokens
are emitted one step at a time, so their count over the window has no such edge effect.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

SATURATION_QUANTILES = (0.2, 0.8)


def saturation_window(finished_s: Sequence[float], *, min_completions: int = 10) -> tuple[float, float] | None:
    """(start, end) seconds: the 20th and 80th percentile completion instants; None with fewer than `min_completions`
    finished requests or a window of zero length."""
    fin = sorted(float(x) for x in finished_s if math.isfinite(x))
    if len(fin) < min_completions:
        return None
    a, b = fin[int(SATURATION_QUANTILES[0] * len(fin))], fin[int(SATURATION_QUANTILES[1] * len(fin))]
    return (a, b) if b > a else None


def saturated_rates(window: tuple[float, float] | None, tokens_in_window: Callable[[float, float], float],
                    mean_output_tokens: float) -> tuple[float, float] | None:
    """(requests/s, output tokens/s) over the window: the tokens emitted in [start, end) over its length."""
    if window is None or not mean_output_tokens > 0:
        return None
    a, b = window
    tok_s = float(tokens_in_window(a, b)) / (b - a)
    return tok_s / mean_output_tokens, tok_s


def completion_rate(finished_s: Sequence[float], *, min_completions: int = 10) -> float | None:
    """Requests/s by counting completions between the 20th and 80th percentile completion (the first estimator, kept
    for chapter mode's pinned figures); None with fewer than `min_completions` or a window of zero length."""
    w = saturation_window(finished_s, min_completions=min_completions)
    if w is None:
        return None
    n = sum(1 for x in finished_s if math.isfinite(x))
    return (int(SATURATION_QUANTILES[1] * n) - int(SATURATION_QUANTILES[0] * n)) / (w[1] - w[0])
