"""Export a stored run's tables as CSV or JSON lines, for pandas, spreadsheets and other tools.

List columns (`chunk_ns`) become JSON arrays in CSV cells; JSONL keeps them as arrays. The pandas recipe
for reading an export back is in docs/loadgen.md ("Export").
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, TextIO

from harness.errors import HarnessError
from harness.store import Run

FORMATS = ("csv", "jsonl")


def _cell(v: Any) -> Any:
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def export_run(run_path: str | Path, fmt: str, *, tables: list[str] | None = None, out: str | Path | None = None,
               stream: TextIO | None = None) -> list[str]:
    """Write the run's `tables` (default: requests) in `fmt`; to `out` (a file for one table, a directory for several),
    or to `stream` (stdout). Returns what was written."""
    if fmt not in FORMATS:
        raise HarnessError(f"export format must be one of {', '.join(FORMATS)}, got {fmt!r}.")
    run = Run(run_path)
    have = run.tables()
    names = tables or ["requests"]
    missing = [t for t in names if t not in have]
    if missing:
        raise HarnessError(f"run {run.path} has no table {', '.join(missing)}; it has: {', '.join(have) or 'none'}.")
    written = []
    for name in names:
        df = run.table(name)
        if out is None:
            dest: TextIO = stream or sys.stdout
            _write(df, fmt, dest)
            written.append(f"{name} -> stdout")
            continue
        o = Path(out)
        path = o / f"{name}.{fmt}" if (len(names) > 1 or o.is_dir()) else o
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="") as fh:
                _write(df, fmt, fh)
        except OSError as exc:
            raise HarnessError(f"cannot write {path} ({exc}); give a writable --out.") from None
        written.append(str(path))
    return written


def _write(df: Any, fmt: str, fh: TextIO) -> None:
    list_cols = [c for c in df.columns if df[c].map(lambda v: isinstance(v, (list, tuple)) or hasattr(v, "tolist")).any()]
    if fmt == "csv":
        df = df.copy()
        for c in list_cols:
            df[c] = df[c].map(lambda v: json.dumps(_cell(v)) if v is not None else "")
        df.to_csv(fh, index=False)
        return
    cols = list(df.columns)
    for row in df.itertuples(index=False, name=None):
        fh.write(json.dumps({c: _cell(v) for c, v in zip(cols, row)}, default=str) + "\n")
