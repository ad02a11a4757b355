"""A host-speed sentinel: a low-duty, engine-independent unit of memory-bound work timed on its own CPU clock.

On the shared 2-vCPU VMs the served loop runs on, the host's speed per CPU-second moves 10-50 % within minutes with
nothing else running on the VM (docs/loop-cpu.md, 2026-12-04 night), and the stage windows before, between and after
the served points do not see the minute a point ran in. The sentinel is a separate process (never the loop's own: its
work would hold up the load generator's clock) that every `period_s` reads SENTINEL_BYTES of float32 once (a sum: a
DRAM stream, as a decode step streams the weights) and writes one line `wall_s cpu_s [engine_cpu_per_s]` per sample:
the wall clock at the end of the sample, the CPU time its thread spent on the read (time.thread_time, so the time it
waited for a core does not count) and, with --pid, the engine's CPU seconds per second since the previous sample. It
runs at nice SENTINEL_NICE so that it takes a core only when one is idle or at a scheduler tick, ~6 ms of one core
every 0.5 s (1.2 % of one of two cores).

Evidence (2026-12-04 23:20-23:40, AMD EPYC VM, llama-server -t 2 -np 4 kept decoding at batch 4, 10-s bins; offline
scripts, not committed): the engine's median step over the bin against the sentinel's median CPU time per read gave
r = 0.87 (second model, step 19.6-23.0 ms), and r = 0.94 and 0.46 in two Gemma runs (step 91-160 ms): the ratio
step / sentinel had a spread (sd of its log) of 2.6 %, 3.5 % and 9.2 % against the step's own 4.7 %, 9.2 % and 10.4 %.
An 8 MB copy (within the 8 MiB L3) tracked worse (r = 0.59-0.71), a single-thread matmul worse still (r = 0.25).

`speed_ratio` turns the samples into the host's speed in an interval relative to reference intervals: the median CPU
time per read in the interval over the median, across the references, of each reference's median. The loop reads it
for each served point against its stage windows (harness.loop.run.sentinel_speed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

SENTINEL_BYTES = 64 * 2**20  # read per sample: far beyond the L3 of the hosts it runs on (8-32 MiB), so a DRAM stream
SENTINEL_PERIOD_S = 0.5
SENTINEL_NICE = 10
MIN_SAMPLES = 3  # an interval with fewer samples has no sentinel speed
BUSY_FRACTION = 0.9  # the loop compares samples taken while the engine used at least this share of its threads


@dataclass(frozen=True)
class SentinelSample:
    wall_s: float  # time.time() at the end of the read
    cpu_s: float  # the reading thread's CPU time for one read of SENTINEL_BYTES
    engine_cpu_per_s: float | None = None  # the watched engine's CPU seconds per wall second since the previous sample

    @property
    def gb_per_s(self) -> float:
        """SENTINEL_BYTES over the CPU time (decimal GB/s): the rate the sample counted."""
        return SENTINEL_BYTES / self.cpu_s / 1e9 if self.cpu_s > 0 else float("nan")


def parse_samples(text: str) -> list[SentinelSample]:
    """Lines `wall_s cpu_s [engine_cpu_per_s]` (the third with --pid; `-` when unreadable); a torn last line (the
    process stopped mid-write) and blank lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) not in (2, 3):
            continue
        try:
            w, c = float(parts[0]), float(parts[1])
            e = float(parts[2]) if len(parts) == 3 and parts[2] != "-" else None
        except ValueError:
            continue
        if c > 0:
            out.append(SentinelSample(w, c, e))
    return out


def busy(samples: Sequence[SentinelSample], min_engine_cpu_per_s: float) -> list[SentinelSample]:
    """The samples taken while the engine used at least `min_engine_cpu_per_s` CPU seconds a second. The sentinel's
    read time depends on what the engine does beside it (2026-12-05 00:02, second model: 8.5 ms a read with the engine
    idle, 7.3 ms with it decoding at batch 4), and stage windows and served points keep it busy for different shares
    of their time, so the loop compares busy samples with busy samples."""
    return [x for x in samples if x.engine_cpu_per_s is not None and x.engine_cpu_per_s >= min_engine_cpu_per_s]


def interval_cpu_s(samples: Sequence[SentinelSample], spans: Sequence[tuple[float, float]],
                   min_samples: int = MIN_SAMPLES) -> float | None:
    """The median CPU seconds per read of the samples that ended within any of `spans` ([t0, t1], wall clock); None
    under `min_samples`."""
    v = [s.cpu_s for s in samples if any(a <= s.wall_s <= b for a, b in spans)]
    return statistics.median(v) if len(v) >= min_samples else None


def speed_ratio(samples: Sequence[SentinelSample], spans: Sequence[tuple[float, float]],
                references: Sequence[tuple[float, float]], min_samples: int = MIN_SAMPLES) -> float | None:
    """The sentinel's CPU time per read within `spans` (a point's load runs: one per repeat) over the median, across
    `references` (the stage windows), of each reference span's own median: > 1 when the host ran slower than during
    the references. None when the spans or every reference hold fewer than `min_samples` samples."""
    x = interval_cpu_s(samples, spans, min_samples=min_samples)
    refs = [r for r in (interval_cpu_s(samples, [iv], min_samples=min_samples) for iv in references) if r is not None]
    if x is None or not refs:
        return None
    return x / statistics.median(refs)


class HostSentinel:
    """The sentinel process: `start()` launches it writing to `path`, `stop()` ends it, `samples()` reads what it wrote
    (also while it runs). A sentinel that fails to start leaves `error` set and no samples; it never fails the loop."""

    def __init__(self, path: str | Path, period_s: float = SENTINEL_PERIOD_S, nbytes: int = SENTINEL_BYTES,
                 pid: int | None = None):
        self.path = Path(path)
        self.pid = pid  # the engine whose CPU use each sample records beside its own read
        self.period_s = period_s
        self.nbytes = nbytes
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None

    def start(self) -> "HostSentinel":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.telemetry.sentinel", "--out", str(self.path), "--period-s", str(self.period_s),
                 "--bytes", str(self.nbytes)] + (["--pid", str(self.pid)] if self.pid else []),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                                        "OPENBLAS_NUM_THREADS": "1"})
        except OSError as exc:
            self.error = f"the host sentinel did not start ({exc})"
        return self

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is not None and p.returncode:
            err = (p.stderr.read() if p.stderr else b"").decode(errors="replace").strip().splitlines()
            self.error = f"the host sentinel exited with code {p.returncode}" + (f": {err[-1]}" if err else "")
        p.terminate()  # (harness.engines.launcher.stop_process_group is a layer above telemetry: docs/architecture.md)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stderr:
            p.stderr.close()

    def samples(self) -> list[SentinelSample]:
        try:
            return parse_samples(self.path.read_text())
        except OSError:
            return []

    def __enter__(self) -> "HostSentinel":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    import numpy as np  # noqa: PLC0415 - the child process only

    ap = argparse.ArgumentParser(prog="python -m harness.telemetry.sentinel", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="file to append `wall_s cpu_s` lines to")
    ap.add_argument("--period-s", type=float, default=SENTINEL_PERIOD_S)
    ap.add_argument("--bytes", type=int, default=SENTINEL_BYTES)
    ap.add_argument("--duration-s", type=float, default=None, help="stop after this long (default: until terminated)")
    ap.add_argument("--pid", type=int, default=None, help="an engine process whose CPU seconds per second each line records")
    a = ap.parse_args(argv)
    if a.period_s <= 0 or a.bytes < 4:
        ap.error(f"--period-s must be > 0 and --bytes >= 4 (got {a.period_s}, {a.bytes})")
    try:
        os.nice(SENTINEL_NICE)
    except OSError:
        pass
    buf = np.random.default_rng(0).random(a.bytes // 4, dtype=np.float32)
    from harness.telemetry.proc import process_cpu_s  # noqa: PLC0415

    t_end = None if a.duration_s is None else time.time() + a.duration_s
    parent = os.getppid()  # orphaned (the loop killed without a chance to stop it): stop too
    prev = (time.perf_counter(), process_cpu_s(a.pid)) if a.pid else None
    with open(a.out, "a", buffering=1) as f:
        while (t_end is None or time.time() < t_end) and os.getppid() == parent:
            t0, c0 = time.perf_counter(), time.thread_time()
            buf.sum()
            c1 = time.thread_time()
            eng = ""
            if prev is not None:
                now = (time.perf_counter(), process_cpu_s(a.pid))
                ok = now[1] is not None and prev[1] is not None and now[0] > prev[0]
                eng = f" {(now[1] - prev[1]) / (now[0] - prev[0]):.4f}" if ok else " -"
                prev = now
            f.write(f"{time.time():.6f} {c1 - c0:.9f}{eng}\n")
            time.sleep(max(0.0, a.period_s - (time.perf_counter() - t0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
