"""The per-process state of a load run: this process's share of sessions, the shared t0, the record buffer.

Every Locust user of a process takes sessions from here; records collect here until the process's
flusher hands them to the run writer (local) or to the master (distributed).
"""

from __future__ import annotations

import time
from time import perf_counter_ns
from typing import Any

from harness.errors import HarnessError
from workloads.artifact import load_artifact
from workloads.config import LoadConfig
from workloads.schedule import split_indices


class LoadState:
    def __init__(self, cfg: LoadConfig, worker_index: int = 0, worker_count: int = 1):
        import gevent.event
        from geventhttpclient.url import URL

        self.cfg = cfg
        self.worker_index = worker_index
        self.worker_count = worker_count
        art = load_artifact(cfg.artifact_path)
        self.artifact = art
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
        self.url_split = URL(cfg.target_url + "/")
        base = self.url_split.path.rstrip("/")
        self.chat_uri = f"{base}/v1/chat/completions"
        self.completions_uri = f"{base}/v1/completions"
        self.model = cfg.model
        self.request_timeout_s = cfg.request_timeout_s
        self.extra_body = dict(cfg.extra_body)
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "llm-dist-harness"}
        key = cfg.api_key()
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def set_t0_unix_ns(self, t0_unix_ns: int) -> None:
        """Map the run's wall-clock t0 onto this process's perf_counter (same host: sub-microsecond)."""
        self.t0_ns = perf_counter_ns() + (t0_unix_ns - time.time_ns())
        self.t0_set.set()

    def next_session(self) -> list[dict[str, Any]] | None:
        if self._next >= len(self.sessions):
            return None
        s = self.sessions[self._next]
        self._next += 1
        return s

    def unstarted_sessions(self) -> list[list[dict[str, Any]]]:
        return self.sessions[self._next:]

    def add_record(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        self.done += 1

    def drain(self) -> list[dict[str, Any]]:
        out, self.records = self.records, []
        return out


_STATE: LoadState | None = None


def set_state(st: LoadState) -> LoadState:
    global _STATE
    _STATE = st
    return st


def get_state() -> LoadState:
    if _STATE is None:
        raise HarnessError("the load state is not set up; run load through `harness bench-pd` or workloads.loadrun.")
    return _STATE


def state_from_config_file(path: str, worker_index: int = 0, worker_count: int = 1) -> LoadState:
    return set_state(LoadState(LoadConfig.load(path), worker_index, worker_count))
