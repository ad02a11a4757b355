"""The per-process state of a load run: this process's share of sessions, the shared t0, the record buffer,
and the requests in flight (so a stopped run can write a `cancelled` record for each).

Every Locust user of a process takes sessions from here; records collect here until the process's
flusher hands them to the run writer (local) or to the master (distributed). Open loop: each session
starts at its intended instant. Closed loop (schedule kind "closed-loop"): a free user takes the next
session at once, and no session starts after t0 + the schedule's span.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

import gevent.event
from geventhttpclient.url import URL

from harness.errors import HarnessError
from workloads.artifact import WorkloadArtifact, load_artifact
from workloads.clock import wall_ns
from workloads.config import LoadConfig
from workloads.records import cancelled_record
from workloads.schedule import split_indices


class LoadState:
    def __init__(self, cfg: LoadConfig, worker_index: int = 0, worker_count: int = 1, artifact: WorkloadArtifact | None = None):
        self.cfg = cfg
        self.worker_index = worker_index
        self.worker_count = worker_count
        art = artifact if artifact is not None else load_artifact(cfg.artifact_path)
        self.artifact = art
        sched = art.meta.get("schedule", {}) if isinstance(art.meta.get("schedule"), dict) else {}
        self.closed_loop = sched.get("kind") == "closed-loop"
        self.live_replies = art.meta.get("replies") == "live"  # later turns carry the server's replies (workloads.conversation)
        self.span_ns = int(float(sched.get("span_s") or 0.0) * 1e9)
        sessions = art.sessions()
        mine = split_indices(len(sessions), worker_index, worker_count)
        self.sessions = [sessions[i] for i in mine]
        self.expected_requests = sum(len(s) for s in self.sessions)
        self._next = 0
        self.t0_ns = 0
        self.t0_set = gevent.event.Event()
        self.records: list[dict[str, Any]] = []
        self.sent = 0
        self.done = 0
        self.users_idle = 0
        self.stopped = False
        self.in_flight: dict[int, tuple[dict[str, Any], int, int]] = {}  # request_index -> (item, intended ns, begun ns)
        self.cancelled: set[int] = set()
        self.begun: set[int] = set()
        self.url_split = URL(cfg.target_url + "/")
        base = self.url_split.path.rstrip("/")
        self.chat_uri = f"{base}/v1/chat/completions"
        self.completions_uri = f"{base}/v1/completions"
        self.model = cfg.model
        self.request_timeout_s = cfg.request_timeout_s
        self.extra_body = dict(cfg.extra_body)
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "llm-dist-harness"}
        self.secret = cfg.api_key()
        if self.secret:
            self.headers["Authorization"] = f"Bearer {self.secret}"

    def set_t0_unix_ns(self, t0_unix_ns: int, clock_offset_ns: int = 0) -> None:
        """Map the run's wall-clock t0 onto this process's perf_counter. `clock_offset_ns` is the master's wall
        clock minus this host's (measured by workloads.distributed); 0 on the master's own host."""
        self.t0_ns = perf_counter_ns() + (t0_unix_ns - clock_offset_ns - wall_ns())
        self.t0_set.set()

    def set_t0_ns(self, t0_ns: int) -> None:
        """The run's t0 on this process's perf_counter, given directly (the coordinator in the same process: no
        second wall-clock mapping, whose two clock reads a preemption could split by milliseconds)."""
        self.t0_ns = t0_ns
        self.t0_set.set()

    def next_session(self) -> list[dict[str, Any]] | None:
        if self.stopped or self._next >= len(self.sessions):
            return None
        if self.closed_loop and perf_counter_ns() >= self.t0_ns + self.span_ns:
            return None
        s = self.sessions[self._next]
        self._next += 1
        return s

    def unstarted_sessions(self) -> list[list[dict[str, Any]]]:
        return self.sessions[self._next:]

    def begin(self, item: dict[str, Any], intended_abs_ns: int) -> None:
        i = int(item["request_index"])
        self.sent += 1
        self.begun.add(i)
        self.in_flight[i] = (item, intended_abs_ns, perf_counter_ns())

    def never_started(self) -> set[int]:
        """Requests of this process's share that were never sent (their session not taken, or a user still waiting
        for their instant when the run ended)."""
        return {int(r["request_index"]) for s in self.sessions for r in s} - self.begun

    def add_record(self, rec: dict[str, Any]) -> None:
        i = rec["request_index"]
        if self.in_flight.pop(i, None) is None and i in self.cancelled:
            return  # already recorded as cancelled when the run was stopped
        self.records.append(rec)
        self.done += 1

    def cancel_in_flight(self, detail: str, error_class: str = "cancelled") -> int:
        """Stop taking sessions and record every request in flight as `cancelled` (or `run_ended`); returns how many."""
        self.stopped = True
        now = perf_counter_ns()
        for i, (item, intended, begun) in self.in_flight.items():
            self.records.append(cancelled_record(item, t0_ns=self.t0_ns, intended_abs_ns=intended, sent_abs_ns=begun,
                                                 cancelled_abs_ns=now, worker_index=self.worker_index, detail=detail,
                                                 error_class=error_class))
            self.cancelled.add(i)
        n = len(self.in_flight)
        self.in_flight.clear()
        return n

    def drain(self) -> list[dict[str, Any]]:
        out, self.records = self.records, []
        return out


_STATE: LoadState | None = None


def _ready_event() -> Any:
    global _READY
    if _READY is None:
        _READY = gevent.event.Event()
    return _READY


_READY: Any = None


def set_state(st: LoadState) -> LoadState:
    global _STATE
    _STATE = st
    _ready_event().set()
    return st


def get_state() -> LoadState:
    if _STATE is None:
        raise HarnessError("the load state is not set up; run load through `harness bench-pd`, workloads.loadrun, "
                           "or `locust -f workloads/locustfile.py` (docs/loadgen.md).")
    return _STATE


def wait_state(timeout_s: float | None = None) -> LoadState | None:
    """The state once set up (a Locust worker gets it from its master after it connected); None on timeout."""
    if _STATE is None:
        _ready_event().wait(timeout_s)
    return _STATE


def state_from_config_file(path: str, worker_index: int = 0, worker_count: int = 1) -> LoadState:
    return set_state(LoadState(LoadConfig.load(path), worker_index, worker_count))
