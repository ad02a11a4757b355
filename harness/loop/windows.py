"""Stage windows: the isolated stages measured more than once over a loop, so each served point is predicted from the
stage measurements taken around it.

Why: on the shared 2-core VM the engine's speed moves 20-40 % within minutes (docs/loop-cpu.md, 2026-12-02): the
batch-1 step was 15.0-15.9 ms in the stage window and 12.0-13.5 ms in the 128/256 points four minutes later, and every
correction the twin takes from the stages inherits the speed of the minute they were measured in (Gemma's 512-token
prefill correction was +35.3, −56.2 and +49.4 ms in three runs of the same code).

How: window 0 is the stage measurement before the served points (it sets the rates: they are fractions of the
capacity the twin predicts from it). Windows 1 … N−1 repeat the same isolated requests between the served points,
evenly by count, the last one after the last point. Each point (a rate point or a capacity burst) is then predicted
from the window before it and the window after it, pooled: every correction is the median over both windows'
requests, so a host that drifted slowly between them is met halfway. That prediction stays held out: it uses stage
requests only, never a served measurement; the report says when it was made (after the point, from windows around it)
and also judges the first window alone and all windows pooled, so each run shows what the windows changed.

Points are measured in the order of their ids (the rate points, mix by mix, then the capacity bursts).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Sequence

WINDOW_MODES = ("bracketing", "first", "pooled")  # the primary prediction, then the two comparisons the report shows


@dataclass(frozen=True)
class StageWindow:
    """One measurement of the isolated stages: when it began (seconds since the loop started), after which served
    point (None: before them all), how many requests it sent and how long it took."""

    index: int
    started_s: float
    after_point: int | None
    requests: int
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_points(point_ids: Sequence[int], n_windows: int) -> tuple[int, ...]:
    """The served points after which windows 1 … n_windows − 1 are measured: evenly by count, the last after the last
    point (so every point has a window after it). Empty for one window or no points."""
    if n_windows < 2 or not point_ids:
        return ()
    ids = sorted(point_ids)
    n, k = len(ids), n_windows - 1
    return tuple(sorted({ids[max(0, math.ceil(j * n / k) - 1)] for j in range(1, k + 1)}))


def bracket(point: int, windows: Sequence[StageWindow]) -> tuple[int, ...]:
    """The windows around `point`: the last one measured before it and the first one after it (one when there is none
    after, e.g. the loop failed before it)."""
    before = [w.index for w in windows if w.after_point is None or w.after_point < point]
    after = [w.index for w in windows if w.after_point is not None and w.after_point >= point]
    out = ([max(before)] if before else []) + ([min(after)] if after else [])
    return tuple(out)


def windows_for(mode: str, point: int, windows: Sequence[StageWindow]) -> tuple[int, ...]:
    """Which windows' requests a point's prediction pools in `mode` (WINDOW_MODES)."""
    if mode == "bracketing":
        return bracket(point, windows)
    if mode == "first":
        return (0,)
    if mode == "pooled":
        return tuple(w.index for w in windows)
    raise ValueError(f"unknown window mode {mode!r}; one of {WINDOW_MODES}")


def of_windows(checks: Sequence[Any], indices: Sequence[int]) -> list[Any]:
    """The request checks measured in the given windows."""
    keep = set(indices)
    return [c for c in checks if c.window in keep]


@dataclass(frozen=True)
class WindowSummary:
    """What one window measured, for the report's spread table: the engine's median prompt time of the isolated
    prefills (`prompt_tokens` tokens) and the client's median decode step at each batch."""

    index: int
    prefill_prompt_s: float | None
    decode_step_s_by_batch: tuple[tuple[int, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(checks: Sequence[Any], index: int) -> WindowSummary:
    mine = [c for c in checks if c.window == index and not c.error]
    pre = [c.engine_prompt_s for c in mine if c.phase == "prefill" and c.engine_prompt_s is not None]
    by_b: dict[int, list[float]] = {}
    for c in mine:
        if c.phase.startswith("decode@") and (st := c.client_step_s) is not None:
            by_b.setdefault(int(c.phase.split("@", 1)[1]), []).append(st)
    return WindowSummary(index, statistics.median(pre) if pre else None,
                         tuple((b, statistics.median(v)) for b, v in sorted(by_b.items())))


def spread_pct(values: Sequence[float]) -> float | None:
    """(max − min) / median in percent; None for fewer than two values."""
    v = [x for x in values if x is not None]
    if len(v) < 2:
        return None
    m = statistics.median(v)
    return 100.0 * (max(v) - min(v)) / m if m else None


__all__ = ["WINDOW_MODES", "StageWindow", "WindowSummary", "bracket", "of_windows", "spread_pct", "summarise",
           "window_points", "windows_for"]
