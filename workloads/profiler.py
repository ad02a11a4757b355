"""Engine profiling on demand during a load run: call the target's `/start_profile` and `/stop_profile` (vLLM, SGLang and
the embedded target have them) over a window of the run, and record the span and where the engine wrote its trace.

`--profile-window START:END` is in seconds into the measurement window (the steady window: [warm-up, span −
cool-down) of intended send time), so `10:20` profiles from warm-up + 10 s to warm-up + 20 s after t0. A window that
does not lie inside the measurement window is refused before the run starts. Calls are POSTs with an optional JSON
body {"output_dir": DIR} (SGLang's field; vLLM ignores the body and writes under VLLM_TORCH_PROFILER_DIR on its host).
A target that answers an error (vLLM started without VLLM_TORCH_PROFILER_DIR answers 404) is recorded with its answer;
the run goes on. Each call is stamped on the run's clock (seconds since t0) before it is sent and when it returned.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from time import perf_counter_ns
from typing import Any

from harness.errors import HarnessError

CALL_TIMEOUT_S = 60.0  # starting a torch profiler on a loaded engine can take seconds


def parse_profile_window(text: str | None) -> tuple[float, float] | None:
    """'START:END' seconds into the measurement window; None when not given."""
    if text is None or str(text).strip() == "":
        return None
    t = str(text).strip()
    a, sep, b = t.partition(":")
    try:
        start, end = float(a), float(b)
    except ValueError:
        raise HarnessError(f"--profile-window {t!r}: give START:END in seconds into the measurement window, e.g. 10:20.") from None
    if not sep or not (math.isfinite(start) and math.isfinite(end)) or start < 0 or end <= start:
        raise HarnessError(f"--profile-window {t!r}: START must be >= 0 and END above START (seconds into the measurement "
                           "window), e.g. 10:20.")
    return start, end


def absolute_window(window: tuple[float, float], *, warmup_s: float, span_s: float, cooldown_s: float) -> tuple[float, float]:
    """The profile window in seconds since t0; refused when it does not lie inside the measurement window."""
    start, end = window
    length = span_s - cooldown_s - warmup_s
    if end > length:
        raise HarnessError(f"--profile-window {start:g}:{end:g} ends {end:g} s into the measurement window, but the window is "
                           f"{length:g} s long ([{warmup_s:g}, {span_s - cooldown_s:g}) s of intended sends: warm-up {warmup_s:g} s, "
                           f"schedule {span_s:g} s, cool-down {cooldown_s:g} s); give END <= {length:g}, or a longer --duration-s.")
    return warmup_s + start, warmup_s + end


@dataclass(frozen=True)
class ProfileCall:
    path: str  # "/start_profile" or "/stop_profile"
    sent_s: float  # seconds since t0
    answered_s: float
    status: int  # HTTP status, 0 when none came
    answer: str  # the body (cut), or the error
    ok: bool


@dataclass(frozen=True)
class ProfileRecord:
    """What the run keeps (profile.json): the window asked for, the two calls, and where the trace went."""

    window_s: tuple[float, float]  # seconds since t0
    window_in_measurement_s: tuple[float, float]  # as given
    calls: list[ProfileCall] = field(default_factory=list)
    trace: str = ""  # where the engine wrote it, as far as the target says
    note: str = ""

    @property
    def span_s(self) -> tuple[float, float] | None:
        """From the start call's answer to the stop call's send: when the engine's profiler surely ran."""
        st = [c for c in self.calls if c.path == "/start_profile" and c.ok]
        sp = [c for c in self.calls if c.path == "/stop_profile"]
        return (st[0].answered_s, sp[0].sent_s) if st and sp else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "span_s": self.span_s}


class ProfileClient:
    def __init__(self, base_url: str, t0_ns: int, *, api_key: str | None = None, output_dir: str | None = None):
        self.base = base_url.rstrip("/")
        self.t0_ns = t0_ns
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.output_dir = output_dir

    def _now_s(self) -> float:
        return (perf_counter_ns() - self.t0_ns) / 1e9

    def call(self, path: str) -> ProfileCall:
        body = json.dumps({"output_dir": self.output_dir} if self.output_dir else {}).encode()
        sent = self._now_s()
        req = urllib.request.Request(self.base + path, data=body, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=CALL_TIMEOUT_S) as r:  # noqa: S310 - the target URL was checked
                return ProfileCall(path, sent, self._now_s(), r.status, r.read(4096).decode("utf-8", "replace"), True)
        except urllib.error.HTTPError as exc:
            text = exc.read(1024).decode("utf-8", "replace")
            return ProfileCall(path, sent, self._now_s(), exc.code, text, False)
        except Exception as exc:  # noqa: BLE001 - a refused or timed-out call is recorded, the run goes on
            return ProfileCall(path, sent, self._now_s(), 0, f"{type(exc).__name__}: {exc}"[:300], False)


def where_trace(calls: list[ProfileCall], output_dir: str | None) -> str:
    """Where the engine wrote its trace, from its answers: a file named by the target (the embedded one, JSON), else
    the directory the engine's own configuration names."""
    for c in reversed(calls):
        try:
            d = json.loads(c.answer) if c.answer.strip().startswith("{") else {}
        except ValueError:
            d = {}
        if isinstance(d, dict) and d.get("trace_file"):
            return f"{d['trace_file']} (on the target's host{', SIMULATED trace' if d.get('simulated') else ''})"
    if output_dir:
        return (f"{output_dir} on the engine's host (sent as output_dir: SGLang writes there; vLLM ignores it and writes under "
                "VLLM_TORCH_PROFILER_DIR)")
    return ("the engine's own profiler directory on its host: vLLM VLLM_TORCH_PROFILER_DIR, SGLang SGLANG_TORCH_PROFILER_DIR "
            "(default /tmp); the target did not name a file")


def failure_note(calls: list[ProfileCall]) -> str:
    bad = [c for c in calls if not c.ok]
    if not bad:
        return ""
    c = bad[0]
    hint = (" (vLLM answers 404 unless started with VLLM_TORCH_PROFILER_DIR set; SGLang needs its profiler enabled)"
            if c.status == 404 else "")
    return f"{c.path} failed at {c.sent_s:.1f} s: HTTP {c.status or 'none'}: {c.answer[:200]}{hint}; the run went on without it"
