"""A full disk does not lose a run's records: the run is refused up front with the numbers when it cannot fit; a disk
that fills mid-run leaves no temporary files, the refused parts go to the rescue directory (or stay counted in memory),
and the run is marked failed with the cause, the paths and what was kept."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import harness.store as store
from harness.errors import HarnessError
from harness.records import new_manifest
from harness.store import Run, RunWriter, check_free_space, estimate_load_run_bytes
from harness.store_process import AppendProcess


def _rows(i: int, n: int = 50) -> list[dict]:
    return [{"request_index": i * n + k, "session_id": 0, "turn": 0, "worker_index": 0, "api": "chat", "intended_ns": k,
             "error_class": "ok", "chunk_ns": list(range(k, k + 64))} for k in range(n)]


def _leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if ".tmp" in p.name]


def test_a_run_that_cannot_fit_is_refused_with_the_numbers(tmp_path, monkeypatch):
    # issue 48 item 14: the 1.97 MB artifact filled a 2 MiB disk and every later part stayed a .tmp
    need = estimate_load_run_bytes(requests=210, output_tokens=210 * 64, artifact_bytes=1_970_000)
    monkeypatch.setattr(store.shutil, "disk_usage", lambda p: type("U", (), {"free": 2_000_000})())
    with pytest.raises(HarnessError) as e:
        check_free_space(tmp_path / "results", need)
    msg = str(e.value)
    assert msg.startswith(f"not enough free space for the run in {tmp_path / 'results'}: it will write about ")
    assert "workload artifact copy 1.97 MB" in msg and f"{tmp_path} has 2.00 MB free" in msg and "--out" in msg
    monkeypatch.setattr(store.shutil, "disk_usage", lambda p: type("U", (), {"free": 10**9})())
    check_free_space(tmp_path / "results", need)  # room enough: no error


def _fill_at(limit_parts: int, monkeypatch, run_dir_holder: list) -> dict:
    """Make writes into the run directory fail with ENOSPC once `limit_parts` parts are written, as a full disk does
    (writing part of the file first, so a temporary file exists when it fails); the manifest too then fails."""
    import pyarrow.parquet as pq

    real, real_atomic = pq.write_table, store._atomic_write_bytes
    state = {"parts": 0, "full": False}

    def in_run(where) -> bool:
        return bool(run_dir_holder) and str(where).startswith(str(run_dir_holder[0]))

    def write_table(table, where, *a, **k):
        if in_run(where):
            state["parts"] += 1
            if state["parts"] > limit_parts:
                state["full"] = True
                Path(where).write_bytes(b"PAR1 half")
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, where, *a, **k)

    def atomic(path, data):
        return _half(path, data) if in_run(path) and state["full"] else real_atomic(path, data)

    def _half(path, data):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        orig = Path.write_bytes

        def failing(self, d):
            if self == tmp:
                orig(self, d[:10])
                raise OSError(errno.ENOSPC, "No space left on device")
            return orig(self, d)

        monkeypatch.setattr(Path, "write_bytes", failing)
        try:
            return real_atomic(path, data)
        finally:
            monkeypatch.setattr(Path, "write_bytes", orig)

    monkeypatch.setattr(pq, "write_table", write_table)
    monkeypatch.setattr(store, "_atomic_write_bytes", atomic)
    return state


def test_parts_refused_by_a_full_disk_go_to_the_rescue_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_RESCUE_DIR", str(tmp_path / "rescue"))
    holder: list = []
    _fill_at(2, monkeypatch, holder)
    w = RunWriter(new_manifest("load"), tmp_path / "results")
    holder.append(w.path)
    with pytest.raises(HarnessError):
        with w:
            for i in range(5):
                w.append("requests", _rows(i))
            raise w.disk_full_error()
    assert _leftovers(tmp_path) == []  # no .part-000NN.parquet.tmp, no .manifest.json.tmp-PID
    r = w.rescue
    assert r is not None and r.parts_rescued == 3 and r.rows_rescued == 150 and not r.in_memory
    assert r.directory == tmp_path / "rescue" / w.manifest.machine / w.manifest.run_id
    msg = str(w.disk_full_error())
    assert msg.startswith(f"no space left on the device writing {w.path / 'requests' / 'part-00003.parquet'}")
    assert (f"Kept: 100 requests rows in {w.path}; 3 part(s) (150 rows: 150 requests rows) written to the rescue directory "
            f"{r.directory}") in msg
    # the rescue directory is a run directory: its manifest says failed, with the cause; its parts read back
    rescued = Run(r.directory)
    assert rescued.manifest.status == "failed" and "no space left on the device" in rescued.manifest.notes[-1]
    assert sorted(rescued.table("requests")["request_index"]) == list(range(100, 250))
    assert sorted(Run(w.path).table("requests")["request_index"]) == list(range(100))
    assert Run(w.path).manifest.status == "failed"  # the full disk's manifest too: rewritten within the blocks it holds


def test_parts_that_fit_nowhere_are_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_RESCUE_DIR", str(tmp_path / "rescue"))
    holder: list = []
    _fill_at(1, monkeypatch, holder)
    w = RunWriter(new_manifest("load"), tmp_path / "results")
    holder.append(w.path)
    real = store.write_part
    monkeypatch.setattr(store, "write_part", lambda run_path, *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
                        if "rescue" in str(run_path) else real(run_path, *a))
    for i in range(3):
        w.append("requests", _rows(i))
    assert w.rescue is not None and len(w.rescue.in_memory) == 2 and w.rescue.rows_in_memory == 100
    assert "2 part(s) (100 rows) fitted on neither disk and are lost when this process ends" in str(w.disk_full_error())
    w.__exit__(None, None, None)  # no error raised, but the disk filled: the run is not complete
    for d in (w.path, w.rescue.directory):  # rewritten in place within its blocks; and beside the rescued parts
        m = Run(d).manifest
        assert m.status == "failed" and "fitted on neither disk" in m.notes[-1]


def _tiny_fs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    ok = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                              capture_output=True).returncode == 0
    return ok


def test_a_real_full_file_system_through_the_part_writer_process(tmp_path, monkeypatch):
    """On a 1 MiB tmpfs (needs root and mount; skipped otherwise): the part writer process hits ENOSPC for real."""
    tiny = tmp_path / "tiny"
    if not _tiny_fs(tiny, "1m"):
        pytest.skip("cannot mount a 1 MiB tmpfs here (needs root); the ENOSPC paths are tested by injection above")
    try:
        monkeypatch.setenv("HARNESS_RESCUE_DIR", str(tmp_path / "rescue"))
        w = RunWriter(new_manifest("load"), tiny / "results")
        parts = AppendProcess(w)
        big = pd.DataFrame({"request_index": range(20000), "chunk_ns": [list(range(i, i + 8)) for i in range(20000)]})
        for i in range(8):  # about 8 x 0.3 MB: the disk fills after the first few parts
            parts.append("requests", big.assign(request_index=big["request_index"] + i * 20000))
        report = parts.close()
        assert report["rewritten"] >= 1 and w.rescue is not None
        assert _leftovers(tiny) == []
        in_run = len(Run(w.path).table("requests")) if any(w.path.glob("requests/part-*.parquet")) else 0
        assert in_run + w.rescue.rows_rescued + w.rescue.rows_in_memory == 8 * 20000
        assert w.rescue.rows_rescued > 0 and not w.rescue.in_memory
        w.__exit__(None, None, None)
        assert Run(w.rescue.directory).manifest.status == "failed"
    finally:
        subprocess.run(["umount", str(tiny)], capture_output=True)
