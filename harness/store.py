"""The only module that reads and writes results/: run directories, manifests, parquet tables.

Layout: results/<machine>/<run_id>/manifest.json and <table>/part-NNNNN.parquet. A run is
written once and never overwritten; every file is written under a temporary name and renamed,
and tables are appended in parts so a run killed midway keeps what it measured.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from harness.errors import HarnessError
from harness.records import SCHEMA_VERSION, TABLE_COLUMNS, RunManifest, upgrade_table, validate_table

DEFAULT_RESULTS = Path("results")


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def nonempty_rows(rows: Any) -> Any | None:
    """`rows` (a DataFrame, a list of dicts, or any iterable of dicts, then listed), or None when it holds none."""
    if not hasattr(rows, "__len__"):
        rows = list(rows)
    return rows if len(rows) else None


def part_path(run_path: Path, table: str, n: int) -> Path:
    return Path(run_path) / table / f"part-{n:05d}.parquet"


def write_part(run_path: Path, run_id: str, table: str, rows: Any, n: int) -> Path | None:
    """Write rows (a DataFrame or a list of dicts) as part `n` of `table` in the run directory `run_path`."""
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        return None
    df = df.copy()
    if table in TABLE_COLUMNS:
        validate_table(table, df, f"append to {Path(run_path) / table}")
    df["schema_version"] = SCHEMA_VERSION
    df["run_id"] = run_id
    out = part_path(run_path, table, n)
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, out)
    return out


class RunWriter:
    """Create results/<machine>/<run_id>/ and append tables in parts.

    Use as a context manager: the manifest's status becomes "complete" on a clean exit and
    "failed" (with the error) otherwise; parts already written stay.
    """

    def __init__(self, manifest: RunManifest, results_dir: str | Path = DEFAULT_RESULTS):
        self.manifest = manifest
        self.path = Path(results_dir) / manifest.machine / manifest.run_id
        if self.path.exists():
            raise HarnessError(f"run directory {self.path} already exists; runs are never overwritten, use a new run id.")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()  # not exist_ok: two writers racing for one run id must not share it
        except FileExistsError:
            raise HarnessError(f"run directory {self.path} already exists; runs are never overwritten, use a new run id.") from None
        except OSError as exc:
            raise HarnessError(f"results directory {str(results_dir)!r} cannot be written ({exc}); give a writable directory "
                               "(--out / --results).") from None
        self._parts: dict[str, int] = {}
        self._write_manifest()

    def _write_manifest(self) -> None:
        _atomic_write_bytes(self.path / "manifest.json", json.dumps(self.manifest.to_dict(), indent=2, default=str).encode())

    def update_manifest(self, **changes: Any) -> None:
        self.manifest = replace(self.manifest, **changes)
        self._write_manifest()

    def append(self, table: str, rows: Any) -> Path | None:
        """Append rows (a DataFrame or a list of dicts) as one more parquet part of `table`."""
        rows = nonempty_rows(rows)
        if rows is None:
            return None
        n = self.reserve_part(table)
        return write_part(self.path, self.manifest.run_id, table, rows, n)

    def reserve_part(self, table: str) -> int:
        """The number of `table`'s next part, taken: for a part written elsewhere (harness.store_process)."""
        n = self._parts.get(table, 0) + 1
        self._parts[table] = n
        return n

    def write_json(self, name: str, obj: Any) -> Path:
        out = self.path / name
        _atomic_write_bytes(out, json.dumps(obj, indent=2, default=str).encode())
        return out

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.update_manifest(status="complete")
        else:
            notes = [*self.manifest.notes, f"failed: {exc_type.__name__}: {exc}"]
            self.update_manifest(status="failed", notes=notes)


class Run:
    """A stored run: its manifest and its tables (upgraded to the current schema on load)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        mf = self.path / "manifest.json"
        if not mf.is_file():
            raise HarnessError(f"{self.path} is not a run directory (no manifest.json); give results/<machine>/<run_id>/.")
        try:
            raw = json.loads(mf.read_text())
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{mf} is not valid JSON ({exc}); the run is damaged.") from None
        self.stored_schema_version = raw.get("schema_version")  # as written, before any upgrade on load
        self.manifest = RunManifest.from_dict(raw, str(mf))

    def tables(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir() if p.is_dir() and any(p.glob("part-*.parquet")))

    def table(self, name: str):
        import pandas as pd

        d = self.path / name
        parts = sorted(d.glob("part-*.parquet"))
        if not parts:
            raise HarnessError(f"run {self.path} has no table {name!r}; it has: {', '.join(self.tables()) or 'none'}.")
        # upgrade part by part: parts of one table may come from different harness versions
        frames = [upgrade_table(pd.read_parquet(p), str(p)) for p in parts]
        return pd.concat(frames, ignore_index=True)

    def json(self, name: str) -> Any:
        return json.loads((self.path / name).read_text())


def iter_runs(root: str | Path = DEFAULT_RESULTS, kind: str | None = None) -> Iterator[Run]:
    """Every run below `root` (a results dir, a machine dir or a run dir), oldest first."""
    root = Path(root)
    if (root / "manifest.json").is_file():
        candidates = [root]
    else:
        candidates = sorted(p.parent for p in root.glob("**/manifest.json"))
    for p in candidates:
        r = Run(p)
        if kind is None or r.manifest.kind == kind:
            yield r
