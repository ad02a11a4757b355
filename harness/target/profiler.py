"""The embedded target's answer to `/start_profile` and `/stop_profile` (the endpoints vLLM and SGLang expose): a trace of
what the simulated engine emitted between the two calls, written as a Chrome trace (chrome://tracing, Perfetto).

vLLM answers both with an empty 200 and writes its torch profiler trace under VLLM_TORCH_PROFILER_DIR on the server;
SGLang answers with text and writes under the request's `output_dir` (or SGLANG_TORCH_PROFILER_DIR, default /tmp).
The embedded target accepts an optional JSON body {"output_dir": DIR} too, and answers with JSON naming the file it
wrote, so a client can say where the trace is. Its events are the emulator's token emits (simulated), not GPU kernels:
one complete event per request (its first to its last emit in the window, args: tokens) and a counter of tokens
emitted per write.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path(tempfile.gettempdir()) / "harness-target-profile"


class ProfileError(Exception):
    """A profile call out of order (start twice, stop before start) or an unwritable directory; the message says which."""


class TargetProfiler:
    def __init__(self, log: Any, default_dir: Path = DEFAULT_DIR):
        self.log = log  # harness.target.server.EmitLog
        self.default_dir = Path(default_dir)
        self.active: dict[str, Any] | None = None
        self.traces: list[str] = []

    def start(self, output_dir: str | None = None) -> dict[str, Any]:
        if self.active is not None:
            raise ProfileError("the profiler is already running; call /stop_profile first")
        out = Path(output_dir) if output_dir else self.default_dir
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProfileError(f"cannot create the profile directory {out} ({exc})") from None
        self.active = {"start_ns": time.perf_counter_ns(), "first_token": len(self.log.emit_ns), "dir": out}
        return {"status": "started", "output_dir": str(out), "simulated": True}

    def stop(self) -> dict[str, Any]:
        if self.active is None:
            raise ProfileError("the profiler is not running; call /start_profile first")
        act, self.active = self.active, None
        stop_ns = time.perf_counter_ns()
        events = self._events(act["first_token"], act["start_ns"])
        path = act["dir"] / f"harness-target-{os.getpid()}-{act['start_ns']}.trace.json"
        doc = {"traceEvents": events, "displayTimeUnit": "ms",
               "otherData": {"source": "harness embedded target (SIMULATED: emulated token emits, not GPU kernels)",
                             "start_perf_counter_ns": act["start_ns"], "stop_perf_counter_ns": stop_ns}}
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)
        except OSError as exc:
            raise ProfileError(f"cannot write the trace {path} ({exc})") from None
        self.traces.append(str(path))
        return {"status": "stopped", "trace_file": str(path), "events": len(events), "span_s": (stop_ns - act["start_ns"]) / 1e9,
                "simulated": True}

    def _events(self, first: int, start_ns: int) -> list[dict[str, Any]]:
        log = self.log
        pid = os.getpid()
        spans: dict[int, list[int]] = {}  # request -> [first emit, last emit, tokens]
        counter: dict[int, int] = {}
        for k in range(first, len(log.emit_ns)):
            r, t = log.request_index[k], log.emit_ns[k]
            s = spans.get(r)
            if s is None:
                spans[r] = [t, t, 1]
            else:
                s[1], s[2] = t, s[2] + 1
            counter[t] = counter.get(t, 0) + 1
        out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": "harness-target (simulated)"}}]
        for r, (a, b, n) in spans.items():
            out.append({"name": log.request_ids[r], "cat": "request", "ph": "X", "pid": pid, "tid": r,
                        "ts": (a - start_ns) / 1e3, "dur": max(b - a, 0) / 1e3, "args": {"tokens": n}})
        out += [{"name": "tokens emitted", "ph": "C", "pid": pid, "ts": (t - start_ns) / 1e3, "args": {"tokens": n}}
                for t, n in sorted(counter.items())]
        return out
