"""The sampled run of one tool's command: its process tree's CPU and the target's counters every ~0.1 s, and
the load window found in those samples (from the last sample before the target's first request to the first
at which every request had finished and no byte was queued)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.telemetry.prometheus import parse_text
from harness.telemetry.proc import CLK_TCK, ProcessTreeCpu, socket_queues


@dataclass
class Sample:
    t_before_s: float  # monotonic, when cpu_before_s was read
    cpu_before_s: float
    requests_received: int | None  # None: the target did not answer
    requests_finished: int | None
    tokens_generated: int | None
    queued_bytes: int | None  # Send-Q + Recv-Q; None: not read (only read once every request has finished)
    recv_q_bytes: int | None
    connections: int | None
    t_after_s: float
    cpu_after_s: float


@dataclass(frozen=True)
class LoadWindow:
    start: int  # sample index
    end: int
    cpu_s: float
    wall_s: float


def find_load_window(samples: list[Sample], n_requests: int) -> LoadWindow:
    """From the last sample before the target received a request to the first one at which all `n_requests`
    had finished and no byte was queued. Raises ValueError when the samples do not show both edges."""
    first = next((i for i, s in enumerate(samples) if s.requests_received), None)
    if first is None:
        raise ValueError("the target never received a request while the command was sampled")
    start = next((i for i in range(first - 1, -1, -1) if samples[i].requests_received == 0), None)
    if start is None:
        raise ValueError("the target had already received requests at the first sample: the load window has no start")
    end = next((i for i in range(first, len(samples))
                if (samples[i].requests_finished or 0) >= n_requests and samples[i].queued_bytes == 0), None)
    if end is None:
        last = samples[-1]
        raise ValueError(f"the load never finished while sampled: {last.requests_finished} of {n_requests} requests "
                         f"finished and {last.queued_bytes} bytes queued at the last sample")
    a, b = samples[start], samples[end]
    return LoadWindow(start, end, b.cpu_after_s - a.cpu_before_s, b.t_after_s - a.t_before_s)


class TargetPoller:
    """Counters of the target over one keep-alive connection, and the socket queues on its port."""

    def __init__(self, url: str):
        host_port = url.split("://", 1)[1].rstrip("/")
        host, port = host_port.rsplit(":", 1)
        self.host, self.port = host.strip("[]"), int(port)
        self.conn: http.client.HTTPConnection | None = None

    def _get(self, path: str) -> bytes:
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=5.0)
                self.conn.request("GET", path)
                return self.conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def counters(self) -> tuple[int | None, int | None, int | None]:
        try:
            info = json.loads(self._get("/harness/info"))
            m = {x.name: x.value for x in parse_text(self._get("/metrics").decode())}
        except (OSError, http.client.HTTPException, ValueError):
            return None, None, None
        return (int(info["requests_total"]), int(m.get("vllm:request_success_total", 0)),
                int(m.get("vllm:generation_tokens_total", 0)))

    def queues(self) -> tuple[int, int, int]:
        """(Send-Q + Recv-Q, Recv-Q, connections) on the target's port, IPv4 and IPv6."""
        own = {self.conn.sock.getsockname()[1]} if self.conn is not None and self.conn.sock is not None else set()
        return socket_queues(self.port, ipv6=":" in self.host, exclude_ports=own)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def run_sampled(cmd: list[str], *, cwd: Path, env: dict[str, str], log_dir: Path, poller: TargetPoller, n_requests: int,
                interval_s: float, timeout_s: float) -> dict[str, Any]:
    """Run `cmd` to its end while sampling its process tree's CPU and the target; returns samples and rusage."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "stdout.txt", "wb") as out, open(log_dir / "stderr.txt", "wb") as err:
        t_start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
    tree = ProcessTreeCpu(proc.pid)
    samples: list[Sample] = []
    sampler_cpu0 = time.process_time()
    status = rusage = None
    timed_out = False
    next_t = time.monotonic()
    try:
        while True:
            t_a, c_a = time.monotonic(), tree.sample_s()
            rec, fin, tok = poller.counters()
            # /proc/net/tcp costs ~5 ms of kernel time per read: read it only when the queues decide the window's end
            q, rq, n = poller.queues() if fin is not None and fin >= n_requests else (None, None, None)
            samples.append(Sample(t_a, c_a, rec, fin, tok, q, rq, n, time.monotonic(), tree.sample_s(full=False)))
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, rusage = st, ru
                break
            if time.monotonic() - t_start > timeout_s:
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            next_t += interval_s
            time.sleep(max(0.0, next_t - time.monotonic()))
    finally:
        if status is None:  # interrupted: stop the command we started, by its own process group
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t_start
    return {"samples": samples, "returncode": proc.returncode, "timed_out": timed_out, "wall_s": wall,
            "rusage_cpu_s": rusage.ru_utime + rusage.ru_stime, "rusage_max_rss_kib": rusage.ru_maxrss,
            "tree_cpu_s_at_exit": samples[-1].cpu_after_s, "orphaned_cpu_s": tree.orphaned_ticks / CLK_TCK,
            "processes_seen": len(tree.seen), "sampler_cpu_s": time.process_time() - sampler_cpu0}
