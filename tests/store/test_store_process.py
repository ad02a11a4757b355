"""Parts appended by the low-priority writer process: written there, numbered by the parent, never lost."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.errors import HarnessError
from harness.records import new_manifest
from harness.store import Run, RunWriter
from harness.store_process import AppendProcess


def _rows(k, n=3):
    return [{"x_s": float(k * 10 + i), "name": f"r{k}-{i}"} for i in range(n)]


def test_parts_written_by_the_child_in_order(tmp_path):
    with RunWriter(new_manifest("load"), tmp_path) as w:
        w.append("things", _rows(0))  # before the child: numbering continues from here
        ap = AppendProcess(w)
        for k in range(1, 5):
            ap.append("things", _rows(k))
        ap.append("things", [])  # empty: no part, no number taken
        rep = ap.close()
        w.append("things", _rows(5))  # after: the parent's numbering is still the owner
    assert rep["parts"] == 4 and rep["rewritten"] == 0 and rep["note"] is None
    assert 0 < rep["writer_cpu_s"] < 30
    names = sorted(p.name for p in (w.path / "things").iterdir())
    assert names == [f"part-{i:05d}.parquet" for i in range(1, 7)]
    df = Run(w.path).table("things")
    assert list(df["x_s"]) == [float(k * 10 + i) for k in range(6) for i in range(3)]


def test_child_death_loses_nothing(tmp_path):
    with RunWriter(new_manifest("load"), tmp_path) as w:
        ap = AppendProcess(w)
        ap.append("things", _rows(1))
        ap.proc.kill()
        ap.proc.wait()
        for k in range(2, 5):
            ap.append("things", _rows(k))  # the first write after the death notices it
        rep = ap.close()
    assert rep["note"] and "load process" in rep["note"]
    assert rep["rewritten"] >= 3
    assert len(Run(w.path).table("things")) == 12


def test_bad_rows_fail_as_they_would_in_process(tmp_path):
    w = RunWriter(new_manifest("load"), tmp_path)
    ap = AppendProcess(w)
    ap.append("micro_cases", [{"not_a_case_column": 1}])
    with pytest.raises(HarnessError, match="micro_cases"):
        ap.close()


def test_killed_parent_child_still_writes_what_it_received(tmp_path):
    """A SIGKILLed load process: its writer sees end-of-file and writes every frame it was handed."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from harness.records import new_manifest
        from harness.store import RunWriter
        from harness.store_process import AppendProcess
        w = RunWriter(new_manifest("load", run_id="killed"), {str(tmp_path)!r})
        ap = AppendProcess(w)
        for k in range(20):
            ap.append("things", [{{"k": k, "i": i}} for i in range(100)])
        print(w.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL
    path = p.stdout.strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((tmp_path / path).glob("things/part-*.parquet"))) < 20:
        time.sleep(0.2)
    df = Run(path).table("things")
    assert sorted(df["k"].unique()) == list(range(20)) and len(df) == 2000
    assert Run(path).manifest.status == "running"  # it never finished, and says so
