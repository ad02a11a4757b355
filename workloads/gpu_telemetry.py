"""GPU telemetry during a load run, sampled by a child process of the load process into the run's table `gpu_metrics`.

Sources (harness.telemetry.gpu_sample has the columns): local NVML (`local`: the engine runs on this host) and
DCGM exporters' Prometheus pages (`endpoints`: [{role, url}], role all / prefill / decode, as for the server metrics).
Every `interval_s` the child reads each source once and stamps the read with perf_counter_ns − the run's t0 (same
host, CLOCK_MONOTONIC, so `t_s` is on the requests' time axis); it writes a parquet part every FLUSH_EVERY_S.

Why a process: an NVML call or an exporter scrape done on the load process's gevent hub would hold it (NVML calls
block in C) and delay arrival stamps; the child, at a lower priority, never touches the hub. It runs in its own
session, so a Ctrl-C to the load's process group does not stop it before its last part; end-of-file on its stdin
(the parent closing it, or the parent dying) makes it write what it holds and report, as harness.store_process does.
An exporter that cannot be reached gives rows with the error, never an exception: the run goes on.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

FLUSH_EVERY_S = 5.0
TABLE = "gpu_metrics"


@dataclass(frozen=True)
class GpuTelemetryConfig:
    local: bool = False  # sample this host's GPUs through NVML
    endpoints: list[dict[str, str]] = field(default_factory=list)  # DCGM exporters: [{"role": ..., "url": ...}]
    interval_s: float = 1.0
    gpu_indices: list[int] | None = None  # NVML indices to sample (None: every GPU)

    @property
    def enabled(self) -> bool:
        return self.local or bool(self.endpoints)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_is_local(url: str | None) -> bool:
    """The target runs on this host (the embedded target, None, or a loopback URL): local NVML sees its GPUs."""
    from urllib.parse import urlsplit

    if url is None:
        return True
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def local_sampling(url: str | None) -> bool:
    """Whether to sample this host's GPUs for a target at `url` by default: it runs here and NVML sees a GPU (none on a
    CPU-only host, where no sampler is started)."""
    from harness.telemetry.nvml import status

    return target_is_local(url) and status()[0]


class Sampler:
    """Reads every source once per call (no thread of its own; the process loop or a test drives it)."""

    def __init__(self, cfg: GpuTelemetryConfig, t0_ns: int, nv: Any = None):
        from harness.telemetry.nvml import open_nvml

        self.cfg = cfg
        self.t0_ns = t0_ns
        self.host = socket.gethostname()
        self.nv, self.nvml_note = (None, "NVML not asked for")
        if cfg.local:
            self.nv, why = (nv, "injected NVML") if nv is not None else open_nvml()
            self.nvml_note = f"NVML: {why}" if self.nv is not None else f"NVML unavailable: {why}"
        self.rows: list[Any] = []
        self.samples = 0
        self.errors: dict[str, dict[str, Any]] = {}  # endpoint -> {"count", "first", "last"}

    def _indices(self) -> list[int]:
        if self.cfg.gpu_indices is not None:
            return list(self.cfg.gpu_indices)
        return list(range(self.nv.nvmlDeviceGetCount()))

    def sample_once(self) -> list[Any]:
        from harness.telemetry import dcgm
        from harness.telemetry.gpu_nvml import read_gpu

        got = []
        if self.nv is not None:
            t_s = (perf_counter_ns() - self.t0_ns) / 1e9
            try:
                got += [read_gpu(self.nv, i, t_s=t_s, host=self.host) for i in self._indices()]
            except Exception as exc:  # noqa: BLE001 - the device count itself failed: one error row
                from harness.telemetry.gpu_sample import GpuSample

                got.append(GpuSample(t_s=t_s, source="nvml", role="all", endpoint="local", host=self.host,
                                     error=f"{type(exc).__name__}: {exc}"[:300]))
        for ep in self.cfg.endpoints:
            t_s = (perf_counter_ns() - self.t0_ns) / 1e9
            got += dcgm.scrape(ep["url"], t_s=t_s, role=ep["role"], timeout_s=min(2.0, max(0.2, self.cfg.interval_s)))
        for s in got:
            if s.error:
                e = self.errors.setdefault(s.endpoint, {"count": 0, "first": s.error, "first_t_s": s.t_s})
                e["count"] += 1
                e["last"] = s.error
            else:
                self.samples += 1
        self.rows += got
        return got

    def take(self) -> list[Any]:
        rows, self.rows = self.rows, []
        return rows

    def report(self) -> dict[str, Any]:
        return {"sources": (["nvml (local)"] if self.cfg.local else []) + [f"dcgm {e['role']} {e['url']}" for e in self.cfg.endpoints],
                "interval_s": self.cfg.interval_s, "samples": self.samples, "errors": self.errors, "nvml": self.nvml_note}


def _write(run_path: str, run_id: str, rows: list[Any], n: int) -> int:
    from harness.store import write_part
    from harness.telemetry.gpu_sample import samples_frame

    if not rows:
        return n
    write_part(Path(run_path), run_id, TABLE, samples_frame(rows), n + 1)
    return n + 1


def run_child(run_path: str, run_id: str, t0_ns: int, cfg: GpuTelemetryConfig) -> dict[str, Any]:
    """The child's loop: sample every interval, write a part every FLUSH_EVERY_S, stop at end-of-file on stdin."""
    stop = threading.Event()

    def _watch_stdin() -> None:
        try:
            while sys.stdin.buffer.read(1):
                pass
        finally:
            stop.set()

    threading.Thread(target=_watch_stdin, daemon=True).start()
    sampler = Sampler(cfg, t0_ns)
    parts = 0
    last_flush = time.monotonic()
    next_t = time.monotonic()
    cpu0 = time.process_time()
    if cfg.local and sampler.nv is None and not cfg.endpoints:
        stop.set()  # nothing to sample: say why and leave
    while not stop.is_set():
        sampler.sample_once()
        if time.monotonic() - last_flush >= FLUSH_EVERY_S:
            parts = _write(run_path, run_id, sampler.take(), parts)
            last_flush = time.monotonic()
        next_t += cfg.interval_s
        stop.wait(max(0.0, next_t - time.monotonic()))
    parts = _write(run_path, run_id, sampler.take(), parts)
    return {**sampler.report(), "parts": parts, "cpu_s": time.process_time() - cpu0}


class GpuTelemetryProcess:
    """Start the sampling child for a run; `close()` stops it and returns its report (sources, samples, errors)."""

    def __init__(self, run_path: Path, run_id: str, t0_ns: int, cfg: GpuTelemetryConfig):
        self.cfg = cfg
        self.error: str | None = None
        self.proc: subprocess.Popen | None = None
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "workloads.gpu_telemetry", str(run_path), run_id, str(t0_ns),
                                          json.dumps(cfg.to_dict())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True)
        except OSError as exc:
            self.error = f"GPU telemetry process could not start ({exc}); the run has no GPU telemetry"

    def close(self, timeout_s: float = 30.0) -> dict[str, Any]:
        if self.proc is None:
            return {"error": self.error}
        proc, self.proc = self.proc, None
        try:
            out, err = proc.communicate(timeout=timeout_s)  # closes its stdin first: the child's signal to stop
        except (OSError, subprocess.TimeoutExpired) as exc:
            proc.kill()
            proc.wait()
            return {"error": f"GPU telemetry process did not finish ({type(exc).__name__}); parts it wrote are kept"}
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            report = json.loads(lines[-1]) if lines else {}
        except ValueError:
            report = {}
        if proc.returncode != 0:
            tail = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()][-1:] or ["(no output)"]
            report["error"] = f"GPU telemetry process exited with status {proc.returncode}: {tail[0][:300]}"
        return report


def main(argv: list[str] | None = None) -> int:
    run_path, run_id, t0, raw = (argv if argv is not None else sys.argv[1:])[:4]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # end-of-file on stdin is the way to stop
    try:
        os.nice(5)  # below the load process: its hub's wake-ups come first
    except OSError:
        pass
    d = json.loads(raw)
    cfg = GpuTelemetryConfig(**d)
    print(json.dumps(run_child(run_path, run_id, int(t0), cfg), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
