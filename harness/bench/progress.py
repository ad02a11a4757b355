"""The one live progress display of a load run (bench-pd, compare-engines, engine --bench-pd).

The load process (workloads.loadrun) prints one JSON progress line a second: elapsed `t_s` of the schedule's
`span_s`, requests `sent`, `done` (a record arrived: success or error) of `expected`, `errors`, and the
running TTFT p50 of the last successes (`ttft_p50_s` over `ttft_n`). `run_load` hands each one to a
Progress; `LoadProgress` shows it with:

* the phase: "startup backlog" until completions first keep up with sends (over the last WINDOW_S seconds,
  completions >= KEEP_UP x sends, at least one done), "steady" after that, "drain" once the schedule has ended
  (t >= span) and the requests still in flight finish;
* in flight (sent - done), errors, the running TTFT p50 (wall seconds);
* ETA: the schedule's remaining time, or the remaining requests at the recent completion rate, whichever is
  longer ("—" while nothing has completed in the window).

Modes: "rich" (a live line drawn by rich on a terminal), "plain" (one text line every `plain_every_s`, for CI
logs and pipes), "quiet" (nothing); "auto" picks rich on a terminal and plain otherwise. `close()` ends the
run's display with one line that says SIMULATED when the target is the embedded emulator (run_load tells it
from the run's engine record).
"""

from __future__ import annotations

import math
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TextIO

from harness.errors import HarnessError

WINDOW_S = 5.0  # the window of the recent send and completion rates (phase, ETA)
KEEP_UP = 0.9  # completions at least this share of sends in the window: the startup backlog has cleared
Mode = Literal["auto", "rich", "plain", "quiet"]
MODES = ("auto", "rich", "plain", "quiet")
# said of every run against a simulated target: the embedded emulator, or one reached by URL that says it is simulated
SIMULATED_NOTE = "SIMULATED target: the harness's emulator (harness.target) served this run; no GPU was measured"


class Progress(Protocol):
    """What run_load reports to: one update per progress line of the load process, close() when the run ends."""

    def update(self, p: dict[str, Any]) -> None: ...

    def close(self, simulated: bool = False) -> None: ...


@dataclass(frozen=True)
class ProgressView:
    """One progress line of the load process, with what is derived from the lines before it."""

    t_s: float
    span_s: float
    sent: int
    done: int
    expected: int
    errors: int
    in_flight: int
    phase: str  # "startup backlog", "steady" or "drain"
    ttft_p50_s: float | None
    eta_s: float | None


class ProgressTracker:
    """Folds successive progress dicts into ProgressViews (pure: no output)."""

    def __init__(self) -> None:
        self.history: deque[tuple[float, int, int]] = deque()  # (t_s, sent, done) over the last WINDOW_S
        self.kept_up = False

    def update(self, p: dict[str, Any]) -> ProgressView:
        t, span = float(p["t_s"]), float(p["span_s"])
        sent, done, expected = int(p["sent"]), int(p["done"]), int(p["expected"])
        self.history.append((t, sent, done))
        while len(self.history) > 2 and self.history[1][0] <= t - WINDOW_S:
            self.history.popleft()
        t0, sent0, done0 = self.history[0]
        d_t, d_sent, d_done = t - t0, sent - sent0, done - done0
        if not self.kept_up and done > 0 and d_t > 0 and d_sent > 0 and d_done >= KEEP_UP * d_sent:
            self.kept_up = True
        phase = "drain" if t >= span else ("steady" if self.kept_up else "startup backlog")
        rate = d_done / d_t if d_t > 0 else 0.0
        remaining = max(0, expected - done)
        if remaining == 0:
            eta: float | None = 0.0
        elif rate > 0:
            eta = max(span - t, remaining / rate)
        else:
            eta = None
        ttft = p.get("ttft_p50_s")
        return ProgressView(t, span, sent, done, expected, int(p.get("errors", 0)), max(0, sent - done), phase,
                            float(ttft) if ttft is not None else None, eta)


def _s(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _eta(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f} s" if x < 120 else f"{x / 60:.1f} min"


def render_line(v: ProgressView) -> str:
    """The plain-text form of one view."""
    return (f"[{v.t_s:7.1f} / {v.span_s:.0f} s] {v.phase:15s} sent {v.sent:5d}  done {v.done:5d}/{v.expected}  "
            f"in flight {v.in_flight:4d}  errors {v.errors}  TTFT p50 {_s(v.ttft_p50_s)}  ETA {_eta(v.eta_s)}")


def final_line(v: ProgressView | None, simulated: bool) -> str:
    head = "load: no progress reported" if v is None else (
        f"load: {v.done}/{v.expected} requests done ({v.errors} errors) after {v.t_s:.1f} s of a {v.span_s:.0f} s schedule")
    return head + (f" — {SIMULATED_NOTE}" if simulated else "")


class LoadProgress:
    """The live display of one load run at a time (reusable: close() ends a run, the next update starts one)."""

    def __init__(self, mode: Mode = "auto", *, simulated: bool = False, stream: TextIO | None = None,
                 plain_every_s: float = 10.0) -> None:
        if mode not in MODES:
            raise HarnessError(f"progress mode must be one of {', '.join(MODES)}, got {mode!r}.")
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            mode = "rich" if getattr(self.stream, "isatty", lambda: False)() else "plain"
        self.mode = mode
        self.simulated = simulated
        self.plain_every_s = plain_every_s
        self._reset()

    def _reset(self) -> None:
        self.tracker = ProgressTracker()
        self.last: ProgressView | None = None
        self._last_plain_t: float | None = None
        self._live: Any = None

    def update(self, p: dict[str, Any]) -> None:
        v = self.tracker.update(p)
        self.last = v
        if self.mode == "plain":
            if self._last_plain_t is None or v.t_s - self._last_plain_t >= self.plain_every_s:
                self._last_plain_t = v.t_s
                print(render_line(v), file=self.stream, flush=True)
        elif self.mode == "rich":
            self._rich(v)

    def _rich(self, v: ProgressView) -> None:
        # lazy: rich adds ~20 ms to the start-up of bench-pd, engine, loop and sweep; only a live display uses it
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        text = Text.assemble((f"[{v.t_s:7.1f} / {v.span_s:.0f} s] ", "dim"),
                             (f"{v.phase:15s}", {"startup backlog": "yellow", "steady": "green", "drain": "cyan"}[v.phase]),
                             f" sent {v.sent}  done {v.done}/{v.expected}  in flight {v.in_flight}  ",
                             (f"errors {v.errors}", "red" if v.errors else ""),
                             f"  TTFT p50 {_s(v.ttft_p50_s)}  ETA {_eta(v.eta_s)}")
        if self._live is None:
            self._live = Live(text, console=Console(file=self.stream), auto_refresh=False, transient=False)
            self._live.start()
        self._live.update(text, refresh=True)

    def close(self, simulated: bool = False) -> None:
        """End the run's display; the last line says SIMULATED when the target is (`simulated`, from the run's
        engine, or as the display was made)."""
        if self.mode == "quiet":
            self._reset()
            return
        if self._live is not None:
            self._live.stop()
            if not self._live.console.is_terminal:  # on a terminal stop() ends the line itself
                print(file=self.stream)
        elif self.mode == "plain" and self.last is not None and self._last_plain_t != self.last.t_s:
            print(render_line(self.last), file=self.stream, flush=True)  # the last state, if not yet shown
        print(final_line(self.last, simulated or self.simulated), file=self.stream, flush=True)
        self._reset()
