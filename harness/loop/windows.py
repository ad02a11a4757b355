"""Stage windows: the isolated stages measured more than once over a loop, so the served points are predicted from the
host's speed over the whole loop rather than from the one minute before them.

Why: on the shared 2-core VM the engine's speed moves 20-40 % within minutes (docs/loop-cpu.md, 2026-12-02): the
batch-1 step was 15.0-15.9 ms in the stage window and 12.0-13.5 ms in the 128/256 points four minutes later, and every
correction the twin takes from the stages inherits the speed of the minute they were measured in (Gemma's 512-token
prefill correction was +35.3, −56.2 and +49.4 ms in three runs of the same code).

How: window 0 is the stage measurement before the served points (it sets the rates: they are fractions of the
capacity the twin predicts from it). Windows 1 … N−1 repeat the same isolated requests between the served points,
evenly by count, the last one after the last point. Each window corrects the base twin on its own (its corrections
are differences of requests measured minutes apart at most, e.g. the context correction's long minus short decode),
and the windows' twins are combined knot by knot: every correction the median over the windows (`combine`).
Mode "all" (the prediction) combines every window, so each point is predicted from the host's median speed over the
loop; "bracketing" combines the windows just before and just after the point (a slow drift met halfway); "first" is
window 0 alone, the twin the points were planned with. The report judges all three. On 2026-12-02 the speed jumped
about rather than drifted (the batch-1 step 3.2, 2.6 and 4.6 ms in three windows of one run), and in the two runs
that first measured windows (which pooled the windows' requests instead of combining their corrections) all windows
together judged more figures within target than the windows around each point or the first window alone (4 against
3 and 2 of 18 on Gemma, 6 against 4 and 5 on the second model), so "all" became the prediction; later runs judge it. These
predictions stay held out: stage requests only, never a served measurement; the report says when they were made
(after the points ran).

Points are measured in the order of their ids (the rate points, mix by mix, then the capacity bursts).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

WINDOW_MODES = ("all", "bracketing", "first")  # the prediction, then the two comparisons the report shows


@dataclass(frozen=True)
class StageWindow:
    """One measurement of the isolated stages: when it began (seconds since the loop started), after which served
    point (None: before them all), how many requests it sent and how long it took."""

    index: int
    started_s: float
    after_point: int | None
    requests: int
    duration_s: float
    phases_s: dict[str, float] = field(default_factory=dict)  # seconds of each part (measure_stage_window's `spent`)

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
    if mode == "all":
        return tuple(w.index for w in windows)
    raise ValueError(f"unknown window mode {mode!r}; one of {WINDOW_MODES}")


SCALAR_CORRECTIONS = ("request_overhead_s", "iteration_overhead_s", "prompt_save_s_per_prompt_token",
                      "prompt_save_s_per_generated_token", "decode_context_ref_tokens")
KNOT_CORRECTIONS = ("decode_correction_by_batch_s", "prefill_correction_by_tokens_s", "decode_context_s_per_token_by_batch")
GRID_CORRECTIONS = ("mixed_correction_by_batch_tokens_s",)


def combine(twins: Sequence[Any], label: str = "") -> Any:
    """One llama.cpp twin whose every stage correction is the median over `twins` (each corrected by one window):
    scalars directly, knot tables at the union of their knots and grids at the union of their cells (each twin's table
    read there, linear between its knots, the nearest outside, as the twin reads it). A twin without a correction does not vote on it. The first twin's
    everything else (scheduler settings, step-time source) is kept: only the corrections differ between windows."""
    from harness.target.llama_server import interpolate_grid, interpolate_knots  # noqa: PLC0415

    if len(twins) == 1:
        return twins[0]
    first = twins[0]
    upd: dict[str, Any] = {}
    for f in SCALAR_CORRECTIONS:
        upd[f] = float(statistics.median(float(getattr(t.settings, f)) for t in twins))
    for f in KNOT_CORRECTIONS:
        tables = [tuple(getattr(t.settings, f)) for t in twins if getattr(t.settings, f)]
        if not tables:
            continue
        knots = sorted({k for tab in tables for k, _ in tab})
        upd[f] = tuple((k, float(statistics.median(interpolate_knots(tab, k) for tab in tables))) for k in knots)
    for f in GRID_CORRECTIONS:
        grids = [tuple(getattr(t.settings, f)) for t in twins if getattr(t.settings, f)]
        if grids:
            cells = sorted({(b, k) for g in grids for b, k, _ in g})
            upd[f] = tuple((b, k, float(statistics.median(interpolate_grid(g, b, k) for g in grids))) for b, k in cells)
    note = f"stage corrections: the median over {label or f'{len(twins)} stage windows'}, correction by correction"
    return replace(first, settings=replace(first.settings, **upd), notes=(*first.notes, note))


# the stage corrections a note lists, with the unit each is read in: (field, label of one cell, scale, unit)
SUMMARY_CORRECTIONS = (("prefill_correction_by_tokens_s", "prefill {} tokens", 1e3, "ms"),
                       ("decode_correction_by_batch_s", "decode B={}", 1e3, "ms"),
                       ("decode_context_s_per_token_by_batch", "context B={}", 1e6, "µs a token"),
                       ("mixed_correction_by_batch_tokens_s", "mixed B={} {} tokens", 1e3, "ms"))


def correction_summary(combined: Any, singles: Sequence[Any]) -> str:
    """Every cell of the stage correction tables of `combined` (the twin the points are predicted with), each with what
    the single windows' twins read there in brackets, in window order (how far the windows agreed): "prefill 512
    tokens +232.5 ms (+232.5, +24.7, +330.1); ..."."""
    from harness.target.llama_server import interpolate_grid, interpolate_knots  # noqa: PLC0415

    def read(t: Any, f: str, key: list[Any], scale: float, digits: int) -> str:
        tab = tuple(getattr(t.settings, f, ()) or ())
        if not tab:
            return "—"
        x = interpolate_grid(tab, *key) if f in GRID_CORRECTIONS else interpolate_knots(tab, key[0])
        return f"{x * scale:+.{digits}f}"

    parts = []
    for f, label, scale, unit in SUMMARY_CORRECTIONS:
        digits = 2 if scale > 1e3 else 1
        for cell in tuple(getattr(combined.settings, f, ()) or ()):
            *key, value = cell
            each = ", ".join(read(t, f, key, scale, digits) for t in singles)
            parts.append(f"{label.format(*key)} {value * scale:+.{digits}f} {unit} ({each})")
    return "; ".join(parts)


def window_checks(checks: Sequence[Any], index: int) -> list[Any]:
    """The request checks one window's correction uses: its own, and for a later window also window 0's prompt-cache
    copy measurement (measured there only: harness.loop.run.measure_stage_window)."""
    from harness.loop.measure import COPY_PHASES  # noqa: PLC0415

    own = [c for c in checks if c.window == index]
    if index == 0:
        return own
    return own + [c for c in checks if c.window == 0 and c.phase.startswith(COPY_PHASES)]


@dataclass(frozen=True)
class WindowSummary:
    """What one window measured, for the report's spread table: the engine's median prompt time of the isolated
    prefills (`prompt_tokens` tokens), the client's median decode step at each batch, and the engine's median prompt
    time of the prompts sent while other slots decoded, per (decode batch, prompt length)."""

    index: int
    prefill_prompt_s: float | None
    decode_step_s_by_batch: tuple[tuple[int, float], ...]
    mixed_prompt_s: tuple[tuple[int, int, float], ...] = ()  # (decode batch, prompt tokens, seconds)
    mixed_extra_s: tuple[tuple[int, int, float], ...] = ()  # the same over the same-length prompt alone just before (median)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(checks: Sequence[Any], index: int) -> WindowSummary:
    from harness.loop.measure import mixed_alone_prompt_s, parse_mixed_phase  # noqa: PLC0415

    mine = [c for c in checks if c.window == index and not c.error]
    pre = [c.engine_prompt_s for c in mine if c.phase == "prefill" and c.engine_prompt_s is not None]
    by_b: dict[int, list[float]] = {}
    mixed: dict[tuple[int, int], list[float]] = {}
    alone = mixed_alone_prompt_s(mine)
    extra: dict[tuple[int, int], list[float]] = {}
    for c in mine:
        if c.phase.startswith("decode@") and (st := c.client_step_s) is not None:
            by_b.setdefault(int(c.phase.split("@", 1)[1]), []).append(st)
        elif (ph := parse_mixed_phase(c.phase)) and ph[0] == "mixed" and c.engine_prompt_s is not None:
            mixed.setdefault((ph[2], ph[1]), []).append(c.engine_prompt_s)
            if (a := alone.get((c.window, c.rep, ph[1], ph[2]))) is not None:
                extra.setdefault((ph[2], ph[1]), []).append(c.engine_prompt_s - a)
    return WindowSummary(index, statistics.median(pre) if pre else None,
                         tuple((b, statistics.median(v)) for b, v in sorted(by_b.items())),
                         tuple((b, p, statistics.median(v)) for (b, p), v in sorted(mixed.items())),
                         tuple((b, p, statistics.median(v)) for (b, p), v in sorted(extra.items())))


__all__ = ["WINDOW_MODES", "StageWindow", "WindowSummary", "bracket", "combine", "correction_summary", "summarise", "window_checks",
           "window_points", "windows_for"]
