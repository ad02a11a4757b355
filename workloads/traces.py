"""Request traces replayed as a workload: Mooncake JSONL, BurstGPT CSV, Azure LLM inference CSV (2023 and 2024), with a
time window, a time scale and a rate cap.

The three steps, in this order, on the trace's own time axis (seconds from its first request):
  1. window   `--trace-window START:END` keeps the requests that arrived in [START, END] s (END empty: to the end);
  2. scale    `--trace-time-scale F` multiplies the gaps (0.5 replays twice as fast);
  3. rate cap `--trace-max-rate R`: when the scaled window's mean rate, (requests − 1) / (last − first arrival), is
     above R, the replay is slowed down uniformly until it is R (the time scale is multiplied by mean / R, stated in
     the artifact as `effective_time_scale`), so bursts keep their shape relative to the mean; no request is dropped.
The format comes from the file (a .jsonl is Mooncake, a CSV header names BurstGPT or Azure) or `--trace-format`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from workloads.mooncake import TraceRequest, read_trace
from workloads.trace_csv import read_csv_trace, read_header, sniff_csv_format

TRACE_FORMATS = ("mooncake", "burstgpt", "azure")
MAX_TRACE_REQUESTS = 1_000_000  # a replay beyond this is a window choice, not a benchmark run


def parse_window(text: str | None) -> tuple[float, float | None] | None:
    """'START:END' (END may be empty: to the end of the trace) in seconds of trace time; None for no window."""
    if text is None or str(text).strip() == "":
        return None
    t = str(text).strip()
    a, sep, b = t.partition(":")
    try:
        start = float(a) if a.strip() else 0.0
        end = float(b) if b.strip() else None
    except ValueError:
        raise HarnessError(f"--trace-window {t!r}: give START:END in seconds of the trace's own time, e.g. 3600:7200 "
                           "(END empty: to the end of the trace).") from None
    if not sep:
        raise HarnessError(f"--trace-window {t!r}: give START:END (a colon between them), e.g. 0:600.")
    if not (math.isfinite(start) and start >= 0) or (end is not None and not (math.isfinite(end) and end > start)):
        raise HarnessError(f"--trace-window {t!r}: START must be >= 0 and END above START (seconds of trace time).")
    return start, end


@dataclass(frozen=True)
class TraceSelection:
    """Which part of a trace to replay, and how fast (the module docstring gives the order)."""

    time_scale: float = 1.0
    window_s: tuple[float, float | None] | None = None
    max_rate_per_s: float | None = None
    max_requests: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.time_scale, bool) or not isinstance(self.time_scale, (int, float)) or not (
                math.isfinite(self.time_scale) and self.time_scale > 0):
            raise HarnessError(f"--trace-time-scale must be a number > 0 (0.5 replays twice as fast), got {self.time_scale!r}.")
        if self.max_rate_per_s is not None and (isinstance(self.max_rate_per_s, bool) or not isinstance(self.max_rate_per_s, (int, float))
                                                or not (math.isfinite(self.max_rate_per_s) and self.max_rate_per_s > 0)):
            raise HarnessError(f"--trace-max-rate must be a number of requests per second > 0, got {self.max_rate_per_s!r}.")
        if self.max_requests is not None and (isinstance(self.max_requests, bool) or not isinstance(self.max_requests, int)
                                              or not 1 <= self.max_requests <= MAX_TRACE_REQUESTS):
            raise HarnessError(f"the trace's request limit must be an integer in [1, {MAX_TRACE_REQUESTS}], got {self.max_requests!r}.")


@dataclass(frozen=True)
class SelectedTrace:
    format: str
    requests: list[TraceRequest]  # in arrival order; timestamp_s on the trace's axis, from its first request
    intended_s: np.ndarray  # the replay's send instants: windowed, scaled, capped, starting at 0
    effective_time_scale: float
    rate_capped: bool
    meta: dict[str, Any] = field(default_factory=dict)


def detect_format(path: str | Path) -> str:
    """'mooncake' for JSON lines, else the CSV layout its header names."""
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    if p.suffix.lower() == ".csv":
        if not p.is_file():
            raise HarnessError(f"trace file {str(p)!r} does not exist; give a Mooncake .jsonl, a BurstGPT or an Azure LLM "
                               "inference .csv.")
        return sniff_csv_format(p, read_header(p)).name
    raise HarnessError(f"trace {p}: cannot tell its format from the name; give --trace-format {' | '.join(TRACE_FORMATS)} "
                       "(.jsonl is Mooncake, .csv BurstGPT or Azure).")


def read_selected(path: str | Path, fmt: str | None = None, selection: TraceSelection = TraceSelection()) -> SelectedTrace:
    """Read a trace in any known format and apply the window, scale and rate cap."""
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise HarnessError(f"--trace-format {fmt!r} is unknown; known: {', '.join(TRACE_FORMATS)}.")
    fmt = fmt or detect_format(path)
    w0, w1 = selection.window_s or (0.0, None)
    meta: dict[str, Any] = {"trace": str(path), "trace_format": fmt}
    if fmt == "mooncake":
        reqs = read_trace(path)
        t_min = min(r.timestamp_s for r in reqs)
        reqs = sorted((TraceRequest(r.timestamp_s - t_min, r.input_length, r.output_length, r.hash_ids) for r in reqs),
                      key=lambda r: r.timestamp_s)
        meta["trace_rows_read"] = len(reqs)
    else:
        # a window or a request limit lets the reader stop early on a time-ordered file
        limit = selection.max_requests if w0 == 0.0 else None
        csv = read_csv_trace(path, fmt, until_s=w1, max_requests=limit)
        reqs = sorted(csv.requests, key=lambda r: r.timestamp_s)
        meta.update({"trace_rows_read": csv.rows_read, "trace_first_timestamp": csv.first_timestamp,
                     "trace_skipped_no_output": csv.skipped_no_output, "trace_skipped_no_input": csv.skipped_no_input,
                     "trace_notes": csv.notes()})
    span_all = reqs[-1].timestamp_s if reqs else 0.0
    picked = [r for r in reqs if r.timestamp_s >= w0 and (w1 is None or r.timestamp_s <= w1)]
    if selection.max_requests is not None:
        picked = picked[:selection.max_requests]
    if not picked:
        raise HarnessError(f"--trace-window {w0:g}:{'' if w1 is None else f'{w1:g}'} holds no request of {path}; the trace's "
                           f"requests arrive from 0 to {span_all:.6g} s (read so far); pick a window inside that.")
    if len(picked) > MAX_TRACE_REQUESTS:
        raise HarnessError(f"the trace selection holds {len(picked)} requests, more than {MAX_TRACE_REQUESTS}; narrow it with "
                           "--trace-window START:END.")
    t = np.asarray([r.timestamp_s for r in picked], dtype=float)
    scaled = (t - t[0]) * selection.time_scale
    scale = selection.time_scale
    capped = False
    if selection.max_rate_per_s is not None and len(scaled) >= 2 and scaled[-1] > 0:
        mean_rate = (len(scaled) - 1) / scaled[-1]
        if mean_rate > selection.max_rate_per_s:
            factor = mean_rate / selection.max_rate_per_s
            scaled = scaled * factor
            scale *= factor
            capped = True
    meta.update({"time_scale": selection.time_scale, "effective_time_scale": scale, "rate_capped": capped,
                 "trace_window_s": [w0, w1], "trace_window_first_s": float(t[0]),
                 "trace_max_rate_per_s": selection.max_rate_per_s, "trace_requests": len(picked),
                 "replay_mean_rate_per_s": (len(scaled) - 1) / scaled[-1] if len(scaled) >= 2 and scaled[-1] > 0 else None})
    return SelectedTrace(fmt, picked, scaled, scale, capped, meta)
