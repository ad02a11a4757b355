"""storage suite: sequential write and read bandwidth of a file on a given path.

Direct I/O (O_DIRECT, page-aligned buffers) where the filesystem allows it; otherwise buffered
I/O with the file's page cache dropped before each read (fsync, then posix_fadvise DONTNEED),
and the case says which (`cache_state`). A write sample includes its fsync: the bytes are on the
device when the clock stops. The file is removed afterwards. Counted bytes: the file size.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path
from typing import Iterator

from harness.errors import HarnessError
from harness.units import MiB
from microbench.backends import Backend
from microbench.case import CaseResult, Peak, Work
from microbench.params import StorageParams
from microbench.suite import Item, Planned, SuiteContext
from microbench.timing import time_cpu

NAME = "storage"
DESCRIPTION = "sequential file write and read bandwidth (O_DIRECT where possible, else page cache dropped per file)"

BLOCK = 1 * MiB


def _open_direct(path: Path, flags: int) -> tuple[int, bool]:
    """Open with O_DIRECT when the OS and filesystem take it; (fd, direct?)."""
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, 0o600), True
        except OSError:
            pass
    return os.open(path, flags, 0o600), False


def _drop_cache(path: Path) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    finally:
        os.close(fd)


def measure_file(ctx: SuiteContext, directory: Path, size: int) -> list:
    b: Backend = ctx.backends[0] if ctx.backends else None  # only for labels; storage has no compute backend
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    buf.write(os.urandom(BLOCK))
    fd_probe, path = tempfile.mkstemp(prefix="harness-storage-", dir=directory)
    os.close(fd_probe)
    p = Path(path)
    blocks = size // BLOCK
    state: dict = {}
    try:
        def write_file() -> None:
            fd, direct = _open_direct(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            state["write_direct"] = direct
            try:
                for _ in range(blocks):
                    os.write(fd, buf)
                os.fsync(fd)
            finally:
                os.close(fd)

        rbuf = mmap.mmap(-1, BLOCK)

        def read_file() -> None:
            fd, direct = _open_direct(p, os.O_RDONLY)
            state["read_direct"] = direct
            try:
                for _ in range(blocks):
                    os.readv(fd, [rbuf])
            finally:
                os.close(fd)

        mw = time_cpu(write_file, ctx.policy)
        write_file()
        dropped = _drop_cache(p)
        read_file()  # learns whether O_DIRECT works for reads here
        flush = None if state["read_direct"] else (lambda: _drop_cache(p))
        mr = time_cpu(read_file, ctx.policy, flush=flush)
        how_w = "O_DIRECT" if state["write_direct"] else "buffered, fsync inside the timed region"
        how_r = "O_DIRECT (page cache bypassed)" if state["read_direct"] else (
            "buffered; page cache dropped for the file before each sample (posix_fadvise DONTNEED)" if dropped
            else "buffered; page cache NOT dropped: reads may come from memory")
        peak = Peak(None, None, "no storage device spec")
        params = {"path": str(directory), "file_bytes": blocks * BLOCK, "block_bytes": BLOCK}
        dev = "cpu" if b is None else b.device

        return [
            CaseResult(NAME, f"seq-write-{blocks * BLOCK}", "os", dev, "bytes", StorageParams(op="write", direct_io=bool(state["write_direct"]), **params, extra={"io": how_w}).to_params(), Work(useful_bytes=float(blocks * BLOCK)), mw, peak, how_w),
            CaseResult(NAME, f"seq-read-{blocks * BLOCK}", "os", dev, "bytes", StorageParams(op="read", direct_io=bool(state["read_direct"]), **params, extra={"io": how_r}).to_params(), Work(useful_bytes=float(blocks * BLOCK)), mr, peak, how_r),
        ]
    finally:
        p.unlink(missing_ok=True)


def cases(ctx: SuiteContext) -> Iterator[Item]:
    directory = Path(ctx.storage_path or tempfile.gettempdir())
    if not directory.is_dir():
        raise HarnessError(f"--storage-path: {str(directory)!r} is not a directory; give an existing directory on the filesystem to measure.")
    size = (32 if ctx.quick else 1024) * MiB
    yield Planned(NAME, "sequential", lambda: measure_file(ctx, Path(directory), size))
