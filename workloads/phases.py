"""The phases of a stored load run, from its requests: startup backlog, steady, drain.

The rule is the live progress display's (harness.bench.progress), applied to the stored records on a 1-s grid:
  startup  [0, a): from t0 until completions first keep up with sends, i.e. over the last WINDOW_S seconds
           completions (records that ended: success or error) >= KEEP_UP × sends, with at least one send and one
           completion in that window;
  steady   [a, b): until the schedule ends (b = its span; a run that never kept up before it has no steady phase);
  drain    [b, c]: the requests still in flight finish (c = the last one's end).
Used to summarise what was sampled beside the requests (GPU telemetry) per phase.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

WINDOW_S = 5.0
KEEP_UP = 0.9
PHASES = ("startup", "steady", "drain")


@dataclass(frozen=True)
class LoadPhases:
    startup_end_s: float  # steady starts here
    steady_end_s: float  # the schedule's end
    end_s: float  # the last request ended
    rule: str = (f"steady from the first second at which completions over the last {WINDOW_S:g} s reach {KEEP_UP:.0%} of "
                 f"the sends over them, to the schedule's end; drain to the last request's end")

    def bounds(self, phase: str) -> tuple[float, float]:
        return {"startup": (0.0, self.startup_end_s), "steady": (self.startup_end_s, self.steady_end_s),
                "drain": (self.steady_end_s, max(self.end_s, self.steady_end_s))}[phase]

    def phase_of(self, t_s: Any) -> np.ndarray:
        """The phase name of each instant (seconds since t0); "before" t0 and "after" the last request's end."""
        t = np.asarray(t_s, dtype=float)
        out = np.full(t.shape, "after", dtype=object)
        out[t <= max(self.end_s, self.steady_end_s)] = "drain"
        out[t < self.steady_end_s] = "steady"
        out[t < self.startup_end_s] = "startup"
        out[t < 0] = "before"
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_phases(requests: Any, span_s: float) -> LoadPhases:
    """Phases of a run from its requests table (pandas: sent_ns, e2e_s) and its schedule's span."""
    sent = requests["sent_ns"].to_numpy(dtype=float) / 1e9 if len(requests) else np.zeros(0)
    e2e = requests["e2e_s"].to_numpy(dtype=float) if len(requests) else np.zeros(0)
    has = np.isfinite(sent)
    sent, ended = sent[has], (sent + e2e)[has]
    ended = ended[np.isfinite(ended)]
    end_s = float(ended.max()) if ended.size else float(span_s)
    steady_start = float(span_s)
    if sent.size and ended.size:
        sent_sorted, ended_sorted = np.sort(sent), np.sort(ended)
        for t in np.arange(1.0, math.floor(span_s) + 1.0, 1.0):
            lo = t - WINDOW_S
            n_sent = np.searchsorted(sent_sorted, t, "right") - np.searchsorted(sent_sorted, lo, "right")
            n_done = np.searchsorted(ended_sorted, t, "right") - np.searchsorted(ended_sorted, lo, "right")
            if n_sent > 0 and n_done > 0 and n_done >= KEEP_UP * n_sent:
                steady_start = float(t)
                break
    return LoadPhases(min(steady_start, float(span_s)), float(span_s), end_s)
