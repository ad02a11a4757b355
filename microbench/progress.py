"""A one-line progress bar on stderr for long runs (drawn only on a terminal, or when forced)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, stream: TextIO | None = None, width: int = 30, force: bool = False):
        self.stream = stream or sys.stderr
        self.width = width
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self._last = 0

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        frac = done / total if total else 1.0
        fill = int(frac * self.width)
        elapsed = time.perf_counter() - self.t0
        eta = f" eta {elapsed / done * (total - done):4.0f}s" if 0 < done < total else ""
        line = f"[{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} {elapsed:4.0f}s{eta} {label}"[:120]
        pad = max(0, self._last - len(line))
        self.stream.write("\r" + line + " " * pad)
        self._last = len(line)
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
