"""Launcher core: start an engine's processes, wait until they are healthy, time it, and always stop them.

Time-to-ready is the startup cost of Chapter 9, §9.6.1, measured on one perf_counter clock from
just before the first process is spawned (t = 0):

    healthy_s        = first HTTP 200 from every process's health endpoint (the last one)
    first_request_s  = the first completed request (a `probe_max_tokens` completion) returns
    ready_s          = first_request_s: the replica has served a request, not merely said "ok"

Each process runs in its own session (process group) so that stopping it reaches the children
an engine forks (vLLM's and SGLang's workers); stop sends SIGTERM to the group, waits
`stop_timeout_s`, then SIGKILLs it. A launch that fails or times out stops what it started and
raises HarnessError with the tail of the failing process's log.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.engines import http
from harness.errors import HarnessError


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a launch: a server, a prefill or decode worker, or a router."""

    role: str  # "server", "prefill-0", "decode-0", "router"
    argv: tuple[str, ...]
    host: str
    port: int
    env: dict[str, str] = field(default_factory=dict)  # added to the inherited environment
    health_path: str = "/health"
    metrics_path: str | None = None  # Prometheus page, when the process exposes one

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def shell(self) -> str:
        """The exact command as one shell line, environment additions first."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "argv": list(self.argv), "command": self.shell()}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start a deployment, in start order; the client talks to `endpoint`."""

    config_name: str
    engine: str
    mode: str
    processes: tuple[ProcessSpec, ...]
    endpoint: str  # base URL clients use (the router's in pd mode)
    served_name: str  # the `model` field of requests
    engine_info: dict[str, Any]  # engine name, version, build, binary, flags (for the run manifest)
    startup_timeout_s: float = 300.0
    poll_interval_s: float = 0.1
    stop_timeout_s: float = 15.0
    probe_prompt: str = "Hello"
    probe_max_tokens: int = 1

    def commands(self) -> list[str]:
        return [p.shell() for p in self.processes]

    def manifest_engine(self) -> dict[str, Any]:
        """The run manifest's `engine` dict: version, command lines and flags."""
        return {
            **self.engine_info,
            "config": self.config_name,
            "mode": self.mode,
            "endpoint": self.endpoint,
            "served_name": self.served_name,
            "processes": [p.to_dict() for p in self.processes],
        }


@dataclass(frozen=True)
class TimeToReady:
    """Startup cost of one launch (§9.6.1), seconds from just before the first spawn."""

    healthy_s: float  # every process answered its health check with HTTP 200
    first_request_s: float  # the first request completed (= time-to-ready)
    per_process_healthy_s: dict[str, float]
    probe_latency_s: float  # how long the first request itself took
    probe_response: dict[str, Any]

    @property
    def ready_s(self) -> float:
        return self.first_request_s

    @property
    def healthy_to_first_request_s(self) -> float:
        return self.first_request_s - self.healthy_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ready_s"] = self.ready_s
        d["healthy_to_first_request_s"] = self.healthy_to_first_request_s
        return d


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _tail(path: Path, n_chars: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return text[-n_chars:].strip() or "(empty log)"


class RunningEngine:
    """Start the processes of a LaunchPlan, wait until ready, stop them on exit (a context manager).

    >>> with RunningEngine(plan) as eng:   # doctest: +SKIP
    ...     print(eng.time_to_ready.ready_s, eng.plan.endpoint)
    """

    def __init__(self, plan: LaunchPlan, log_dir: str | Path | None = None,
                 probe: Callable[["RunningEngine"], http.HttpResponse] | None = None):
        self.plan = plan
        self._own_log_dir = log_dir is None
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix=f"harness-{plan.engine}-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[tuple[ProcessSpec, subprocess.Popen, Path]] = []
        self.time_to_ready: TimeToReady | None = None
        self._probe = probe or default_probe
        self._t0 = 0.0

    # ---- lifecycle ----

    def __enter__(self) -> "RunningEngine":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._t0

    def start(self) -> TimeToReady:
        plan = self.plan
        self._t0 = time.perf_counter()
        deadline = self._t0 + plan.startup_timeout_s
        healthy: dict[str, float] = {}
        for spec in plan.processes:
            healthy[spec.role] = self._spawn_and_wait(spec, deadline)
        healthy_s = max(healthy.values())
        t_probe = time.perf_counter()
        resp = self._probe(self)
        first = time.perf_counter()
        if resp.status != 200:
            raise HarnessError(
                f"{plan.engine} ({plan.config_name}) is healthy but its first request failed with HTTP {resp.status}: "
                f"{resp.text[:500]}; see the logs in {self.log_dir}."
            )
        body = resp.json()
        self.time_to_ready = TimeToReady(
            healthy_s=healthy_s,
            first_request_s=first - self._t0,
            per_process_healthy_s=healthy,
            probe_latency_s=first - t_probe,
            probe_response=body if isinstance(body, dict) else {"body": body},
        )
        return self.time_to_ready

    def _spawn_and_wait(self, spec: ProcessSpec, deadline: float) -> float:
        log = self.log_dir / f"{spec.role}.log"
        env = {**os.environ, **spec.env}
        try:
            fh = open(log, "wb")
            try:
                proc = subprocess.Popen(
                    list(spec.argv), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env, start_new_session=True,
                )
            finally:
                fh.close()
        except FileNotFoundError:
            raise HarnessError(
                f"{self.plan.engine}: command {spec.argv[0]!r} not found for {spec.role}; install the engine "
                f"(see docs/engines.md) or set its binary in the config."
            ) from None
        except PermissionError:
            raise HarnessError(f"{self.plan.engine}: {spec.argv[0]!r} is not executable; check the file's permissions.") from None
        self.procs.append((spec, proc, log))
        url = spec.base_url + spec.health_path
        last = "no answer yet"
        while True:
            code = proc.poll()
            if code is not None:
                raise HarnessError(
                    f"{self.plan.engine} {spec.role} exited with code {code} before it was healthy; "
                    f"command: {spec.shell()}\nlast log lines ({log}):\n{_tail(log)}"
                )
            try:
                r = http.get(url, timeout_s=max(0.5, self.plan.poll_interval_s * 10))
                if r.status == 200:
                    return time.perf_counter() - self._t0
                last = f"HTTP {r.status} {r.text[:200]}"
            except http.EngineUnreachable as exc:
                last = str(exc)
            if time.perf_counter() > deadline:
                raise HarnessError(
                    f"{self.plan.engine} {spec.role} was not healthy within startup.timeout_s = "
                    f"{self.plan.startup_timeout_s:g} s (last: {last}); raise the timeout or check the log:\n"
                    f"{_tail(log)}"
                )
            time.sleep(self.plan.poll_interval_s)

    def stop(self) -> dict[str, int | None]:
        """Stop every process group, last started first; returns each role's exit code."""
        codes: dict[str, int | None] = {}
        for spec, proc, _ in reversed(self.procs):
            codes[spec.role] = stop_process_group(proc, self.plan.stop_timeout_s)
        self.procs.clear()
        return codes

    def log_tail(self, role: str, n_chars: int = 2000) -> str:
        return _tail(self.log_dir / f"{role}.log", n_chars)


def stop_process_group(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """SIGTERM the process's group, wait up to `timeout_s`, then SIGKILL; returns the exit code."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    # the leader may be gone while children it forked still hold the group: kill what is left
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    return proc.returncode


def default_probe(eng: RunningEngine) -> http.HttpResponse:
    """The first completed request: a short non-streamed /v1/completions call."""
    plan = eng.plan
    body = {"model": plan.served_name, "prompt": plan.probe_prompt, "max_tokens": plan.probe_max_tokens, "temperature": 0}
    return http.post_json(plan.endpoint + "/v1/completions", body, timeout_s=max(30.0, plan.startup_timeout_s))
