"""The only module that reads and writes results/: run directories, manifests, parquet tables.

Layout: results/<machine>/<run_id>/manifest.json and <table>/part-NNNNN.parquet. A run is
written once and never overwritten; every file is written under a temporary name and renamed,
and tables are appended in parts so a run killed midway keeps what it measured. The JSON sidecars
(plan.json; summary.json by workloads.summary, loop_report.json by harness.loop_records) carry a schema_version
like every harness file (SIDECAR_VERSIONS; harness.versioning): ones written before they were versioned are version 1.

A damaged parquet part (truncated, overwritten) is named with what of the run is still readable;
`Run.table` then returns the readable parts with a warning (or refuses, with strict=True).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from harness.errors import HarnessError
from harness.records import SCHEMA_VERSION, TABLE_COLUMNS, RunManifest, upgrade_table, validate_table
from harness.versioning import load_versioned, stamp_version

DEFAULT_RESULTS = Path("results")

# JSON sidecars of a run -> their schema_version; bump it (and add a step to SIDECAR_UPGRADES) when the
# writer changes a field. History, each: 1 — first version (also: files written before sidecars carried a version).
# summary.json is versioned by its owner, workloads.summary (SUMMARY_SCHEMA_VERSION, read_summary), and loop_report.json
# by harness.loop_records.report (LOOP_REPORT_SCHEMA_VERSION, its upgrade steps). A sidecar not listed here (e.g.
# llama_cpp_raw.json, whose keys are tool names) is written as given: list it to version it.
SIDECAR_VERSIONS: dict[str, int] = {"plan.json": 1, "loop_report.md.json": 1, "sweep.json": 1,
                                    "session_extra.json": 1, "engine_logs.json": 1}
SIDECAR_UPGRADES: dict[str, dict[int, Callable[[dict], dict]]] = {name: {} for name in SIDECAR_VERSIONS}


def warn(message: str) -> None:
    """A warning the user can act on, on stderr (the CLI prints errors the same way)."""
    import sys

    print(f"warning: {message}", file=sys.stderr)


def read_json_file(path: Path, what: str, fix: str) -> Any:
    """Parse a JSON file the harness wrote; a damaged, binary or non-UTF-8 one is a HarnessError naming it."""
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); it is not a {what} or it is "
                           f"damaged; {fix}.") from None
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{path} is not valid JSON ({exc}); {fix}.") from None
    except IsADirectoryError:
        raise HarnessError(f"{path} is a directory, not a {what}; {fix}.") from None


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


_RUNS_STARTED: list[Path] = []  # run directories this process created, oldest first (the CLI's crash log goes there)


def runs_started() -> list[Path]:
    """Run directories created by RunWriter in this process, oldest first."""
    return list(_RUNS_STARTED)


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
        _RUNS_STARTED.append(self.path)

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
        """Write a JSON sidecar; the versioned ones (SIDECAR_VERSIONS) get their schema_version stamped unless the
        writer set one."""
        if name in SIDECAR_VERSIONS and isinstance(obj, dict) and "schema_version" not in obj:
            obj = stamp_version(obj, SIDECAR_VERSIONS[name])
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
        raw = read_json_file(mf, "run manifest", "the run is damaged; rerun it or remove the directory")
        self.stored_schema_version = raw.get("schema_version") if isinstance(raw, dict) else None  # as written, before upgrade
        self.manifest = RunManifest.from_dict(raw, str(mf))
        self.damaged_parts: list[str] = []  # parts Run.table skipped, each "path (why)"

    def tables(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir() if p.is_dir() and any(p.glob("part-*.parquet")))

    def table(self, name: str, *, strict: bool = False):
        """The table's parts, upgraded and concatenated. A damaged part is skipped with a warning naming it and
        what was read instead; with `strict`, or when no part is readable, it is a HarnessError."""
        import pandas as pd

        d = self.path / name
        parts = sorted(d.glob("part-*.parquet"))
        if not parts:
            raise HarnessError(f"run {self.path} has no table {name!r}; it has: {', '.join(self.tables()) or 'none'}.")
        # upgrade part by part: parts of one table may come from different harness versions
        frames, bad = [], []
        for p in parts:
            try:
                df = pd.read_parquet(p)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for a damaged file
                bad.append(f"{p} ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else 'unreadable'})")
                continue
            frames.append(upgrade_table(df, str(p)))
        if bad:
            rows = sum(len(f) for f in frames)
            what = (f"the other {len(frames)} of its {len(parts)} parts ({rows} rows) are readable"
                    if frames else f"none of its {len(parts)} parts is readable")
            msg = (f"run {self.path}: table {name!r} has {len(bad)} damaged part(s): {'; '.join(bad)}; {what}")
            if strict or not frames:
                raise HarnessError(f"{msg}. Rerun the measurement, or move the damaged part(s) aside to use the rest.")
            self.damaged_parts.extend(b for b in bad if b not in self.damaged_parts)
            warn(f"{msg}; using the readable rows only, so figures from this table cover part of the run.")
        return pd.concat(frames, ignore_index=True)

    def json(self, name: str) -> Any:
        """A JSON sidecar (FileNotFoundError when absent); the versioned ones are upgraded to their schema_version."""
        p = self.path / name
        if not p.exists():
            raise FileNotFoundError(p)
        d = read_json_file(p, name, "the run is damaged; rerun it")
        if name in SIDECAR_VERSIONS:
            d = load_versioned(d, SIDECAR_VERSIONS[name], SIDECAR_UPGRADES[name], str(p), default=1, what=name,
                               fix="the run is damaged; rerun it")
        return d


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
