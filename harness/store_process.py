"""Parquet parts appended by a separate low-priority process, so encoding never stalls a timing-critical one.

Building and writing one parquet part costs about 10 ms of pandas/Arrow work that holds the GIL
(measured on the project machine for a 4-row requests part). Done on a load generator's gevent hub,
or on a thread of its process, that time delays every arrival stamp taken meanwhile: with a part
every 20 ms, the hub's wake-up latency to a socket event had p99 6.3 ms from a thread (and 5.5 ms
with a 0.5 ms GIL switch interval) against 0.2 ms with no writing; from this process at SCHED_IDLE
it was 0.32 ms (at nice 19 alone, 3.5 ms: on two cores the writer still took the CPU the hub woke on).

The parent takes each part's number from its RunWriter (so numbering has one owner), pickles the
rows and writes the frame to the child's stdin; the child (nice 19 and SCHED_IDLE where the OS
allows, SIGINT ignored so a Ctrl-C on the run still lets it write what it received) writes each
frame as that part. On close the child reports the CPU seconds its encoding and writing took (its
start-up is not counted: a fixed cost, like the parent's imports), which the caller adds to the
client's cost. Any part missing after close (the child died, or refused a frame) is written by the
parent itself, so nothing handed over is lost, and a bad frame fails the run as it would in-process.
If the parent is killed, the child sees end-of-file and still writes everything it received. The child
runs in its own session, so a signal sent to the load's process group (Ctrl-C, `kill -- -PGID`) does not
reach it: the parent stays able to hand over the records of what was in flight.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from harness.store import RunWriter, nonempty_rows, part_path, write_part

_HEADER = struct.Struct("<Q")


class AppendProcess:
    """Append parts of `writer`'s run from a child process; `close()` returns the child's report."""

    def __init__(self, writer: RunWriter):
        self.writer = writer
        self.sent: list[tuple[str, int, Any]] = []  # (table, part number, rows): re-written here if missing at close
        self.error: str | None = None
        self.proc: subprocess.Popen | None = None
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "harness.store_process", str(writer.path), writer.manifest.run_id],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         # its own session: a signal to the load's process group (Ctrl-C, kill -TERM -PGID)
                                         # must not kill it while the load process still hands it the cancelled records
                                         start_new_session=True)
        except OSError as exc:  # no child: every part is written in this process at close
            self.error = f"part writer process could not start ({exc}); parts were written by the load process"

    def append(self, table: str, rows: Any) -> None:
        rows = nonempty_rows(rows)
        if rows is None:
            return
        n = self.writer.reserve_part(table)
        self.sent.append((table, n, rows))
        if self.proc is None:
            return
        data = pickle.dumps((table, n, rows), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except OSError as exc:  # the child died: the rest waits for close()
            self.error = f"part writer process failed ({type(exc).__name__}: {exc}); the remaining parts were written by the load process"
            self._reap()

    def _reap(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.kill()
        proc.wait()

    def close(self) -> dict[str, Any]:
        """Wait for the child; write here any part it did not; return {"writer_cpu_s", "parts", "rewritten", "note"}."""
        report: dict[str, Any] = {}
        if self.proc is not None:
            proc, self.proc = self.proc, None
            try:
                proc.stdin.close()
                out = proc.stdout.read()
                proc.wait()
                report = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
            except (OSError, ValueError, IndexError) as exc:
                self.error = self.error or f"part writer process report unreadable ({exc})"
                proc.kill()
                proc.wait()
            if proc.returncode != 0 and self.error is None:
                self.error = f"part writer process exited with status {proc.returncode}"
        rewritten = 0
        for table, n, rows in self.sent:  # a part the child could not write (it died; the disk is full) is written here,
            if not part_path(self.writer.path, table, n).exists():  # or to the rescue directory (RunWriter.write_part)
                self.writer.write_part(table, rows, n)
                rewritten += 1
        self.sent = []
        return {"writer_cpu_s": float(report.get("cpu_s", 0.0)), "parts": int(report.get("parts", 0)), "rewritten": rewritten,
                "note": self.error}


def _lower_priority() -> None:
    try:
        os.nice(19)
    except OSError:
        pass
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass


def _warm_up() -> None:
    """Encode one tiny part in memory: pandas and Arrow import their parquet paths lazily, on the first
    write (about 0.4 s of CPU here), which is start-up, not the cost of the records."""
    pd.DataFrame({"a": [1], "b": [[1, 2]], "c": ["x"]}).to_parquet(io.BytesIO(), index=False)


def _read_exact(f: Any, n: int) -> bytes | None:
    buf = f.read(n)
    return buf if len(buf) == n else None


def main(argv: list[str] | None = None) -> int:
    run_path, run_id = (argv if argv is not None else sys.argv[1:])[:2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # end-of-file on stdin is the only way to stop
    _lower_priority()
    _warm_up()
    f = sys.stdin.buffer
    cpu_s = 0.0
    parts = 0
    while True:
        head = _read_exact(f, _HEADER.size)
        if head is None:
            break
        body = _read_exact(f, _HEADER.unpack(head)[0])
        if body is None:
            break
        c0 = time.process_time()
        table, n, rows = pickle.loads(body)
        try:
            write_part(Path(run_path), run_id, table, rows, n)
            parts += 1
        except Exception as exc:  # noqa: BLE001 - the parent writes the missing part itself and reports the error
            print(f"part writer: {table} part {n} not written here: {type(exc).__name__}: {exc}", file=sys.stderr)
        cpu_s += time.process_time() - c0
    print(json.dumps({"cpu_s": cpu_s, "parts": parts}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
