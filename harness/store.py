"""The only module that reads and writes results/: run directories, manifests, parquet tables.

Layout: results/<machine>/<run_id>/manifest.json and <table>/part-NNNNN.parquet. A run is
written once and never overwritten; every file is written under a temporary name and renamed,
and tables are appended in parts so a run killed midway keeps what it measured. Every part of a
declared table is written with the table's declared types (harness.table_schemas), so the parts of
a table read back as one dataset (`pandas.read_parquet(RUN/"requests")`, `pyarrow.dataset`). The JSON sidecars
(plan.json; summary.json by workloads.summary, loop_report.json by harness.loop_records) carry a schema_version
like every harness file (SIDECAR_VERSIONS; harness.versioning): ones written before they were versioned are version 1.

A damaged parquet part (truncated, overwritten) is named with what of the run is still readable;
`Run.table` then returns the readable parts with a warning (or refuses, with strict=True).

A full disk does not lose a run's records. Before a run, `check_free_space` refuses with the numbers when the
results directory has less room than the run will write (`estimate_load_run_bytes`). When a write still fails for
lack of space (ENOSPC, EDQUOT), its temporary file is removed and the run writer switches to a rescue directory,
$HARNESS_RESCUE_DIR or <temp dir>/harness-rescue/, laid out as results/ (<machine>/<run_id>/<table>/part-N.parquet,
the manifest beside them): what the full disk refused goes there, and what fits nowhere stays in memory and is
counted. The run is marked failed with the cause and both paths (`RunWriter.disk_full_error`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from harness.errors import HarnessError
from harness.records import SCHEMA_VERSION, TABLE_COLUMNS, RunManifest, upgrade_table, validate_table
from harness.table_schemas import to_arrow
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
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no temporary file left behind (a full disk, an interrupt)
        raise


def _overwrite_within_blocks(path: Path, data: bytes) -> bool:
    """Rewrite `path` in place when `data` fits in the blocks it already holds (a full disk needs none for that);
    False, leaving the file as it was, when it does not fit or the write fails."""
    try:
        st = path.stat()
        if len(data) > st.st_blocks * 512:
            return False
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
        return True
    except OSError:
        return False


def is_disk_full(exc: BaseException) -> bool:
    """An OSError that says the file system has no room (ENOSPC) or the user's quota is spent (EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def rescue_root() -> Path:
    """Where a run's records go when its results directory is full: $HARNESS_RESCUE_DIR, else <temp dir>/harness-rescue."""
    return Path(os.environ.get("HARNESS_RESCUE_DIR") or Path(tempfile.gettempdir()) / "harness-rescue")


# bytes a stored load run takes, for the free-space check. Measured on a bench-pd run against the embedded target
# (35 requests, 35,875 streamed tokens, 1.52 MB in all): the requests table 10.8 bytes per token (its chunk_ns stamps,
# incompressible) and the target's emit log 11.9, the workload artifact copy as its file, everything else (manifest,
# sidecars, workload table, scraped metrics) 50 kB. Allowed here with about 1.5x margin: 32 bytes per token, 600 per
# request, 512 KiB for the rest.
RECORD_BYTES = 600
TOKEN_STAMP_BYTES = 32
WORKLOAD_ROW_BYTES = 100
RUN_OVERHEAD_BYTES = 512 * 1024


def estimate_load_run_bytes(requests: int, output_tokens: int, artifact_bytes: int) -> dict[str, int]:
    """What a load run will write, by part: the artifact copy, the records, the workload table, the rest."""
    return {"workload artifact copy": int(artifact_bytes),
            "request records and token stamps": requests * RECORD_BYTES + output_tokens * TOKEN_STAMP_BYTES,
            "workload table": requests * WORKLOAD_ROW_BYTES, "manifest, sidecars and metrics": RUN_OVERHEAD_BYTES}


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def check_free_space(results_dir: str | Path, needed: dict[str, int]) -> None:
    """Refuse, with the numbers, a run whose results directory has less free space than the run will write."""
    d = Path(results_dir)
    probe = d
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # nothing to measure against; the writes themselves will tell
    total = sum(needed.values())
    if free < total:
        parts = ", ".join(f"{k} {_mb(v)}" for k, v in needed.items())
        raise HarnessError(f"not enough free space for the run in {d}: it will write about {_mb(total)} ({parts}; estimated) "
                           f"and {probe} has {_mb(free)} free. Free {_mb(total - free)} or more there, or give a results "
                           "directory on a larger disk (--out).")


@dataclass
class Rescue:
    """What a full results disk refused and where it went: written to the rescue directory, or kept in memory only."""

    cause: str  # the first error, with the path it was writing
    directory: Path  # the rescue run directory
    parts_rescued: int = 0
    rows_rescued: int = 0
    rows_by_table: dict[str, int] = field(default_factory=dict)  # rows written to the rescue directory, per table
    files_rescued: list[str] = field(default_factory=list)
    files_lost: list[str] = field(default_factory=list)  # files (manifest, sidecars) written on neither disk
    in_memory: list[tuple[str, int, Any]] = field(default_factory=list)  # (table, part, rows) written nowhere

    @property
    def rows_in_memory(self) -> int:
        return sum(len(r) for _, _, r in self.in_memory)


def nonempty_rows(rows: Any) -> Any | None:
    """`rows` (a DataFrame, a list of dicts, or any iterable of dicts, then listed), or None when it holds none."""
    if not hasattr(rows, "__len__"):
        rows = list(rows)
    return rows if len(rows) else None


def part_path(run_path: Path, table: str, n: int) -> Path:
    return Path(run_path) / table / f"part-{n:05d}.parquet"


def write_part(run_path: Path, run_id: str, table: str, rows: Any, n: int) -> Path | None:
    """Write rows (a DataFrame or a list of dicts) as part `n` of `table` in the run directory `run_path`."""
    # lazy: pandas adds ~0.5 s to every verb's start-up (all import the store); only table reads use it
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        return None
    df = df.copy()
    if table in TABLE_COLUMNS:
        validate_table(table, df, f"append to {Path(run_path) / table}")
    df["schema_version"] = SCHEMA_VERSION
    df["run_id"] = run_id
    # lazy: pyarrow.parquet adds ~50 ms to every verb's start-up (all import the store); only table I/O uses it
    import pyarrow.parquet as pq

    arrow = to_arrow(table, df, f"append to {Path(run_path) / table}")  # the table's declared types (harness.table_schemas)
    out = part_path(run_path, table, n)
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        pq.write_table(arrow, tmp)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no half-written .tmp left behind (a full disk, an interrupt)
        raise
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
        self.rescue: Rescue | None = None  # set when the results disk is full (see the module docstring)
        self._write_manifest()
        _RUNS_STARTED.append(self.path)

    # ---- a full disk: temporary files removed, what it refused written to the rescue directory or kept in memory ----
    def _start_rescue(self, exc: OSError, what: Path) -> Rescue:
        if self.rescue is None:
            d = rescue_root() / self.manifest.machine / self.manifest.run_id
            self.rescue = Rescue(f"no space left on the device writing {what} ({exc.strerror or exc})", d)
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError:
                pass
        return self.rescue

    def _write_or_rescue_bytes(self, name: str, data: bytes) -> Path:
        out = self.path / name
        try:
            _atomic_write_bytes(out, data)
            return out
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            r = self._start_rescue(exc, out)
        if name == "manifest.json" and _overwrite_within_blocks(out, data):  # the run's own status stays readable
            return out
        try:  # a small file: the manifest or a sidecar
            _atomic_write_bytes(r.directory / name, data)
        except OSError:
            if name not in r.files_lost:
                r.files_lost.append(name)
            return out
        if name not in r.files_rescued:
            r.files_rescued.append(name)
        return r.directory / name

    def _write_manifest(self) -> None:
        data = json.dumps(self.manifest.to_dict(), indent=2, default=str).encode()
        if self.rescue is not None:  # the rescue directory is a run directory of its own: keep its manifest current
            try:
                _atomic_write_bytes(self.rescue.directory / "manifest.json", data)
            except OSError:
                pass
        self._write_or_rescue_bytes("manifest.json", data)

    def write_part(self, table: str, rows: Any, n: int) -> Path | None:
        """Write part `n` of `table`; on a full disk write it to the rescue directory, else keep it in memory."""
        if self.rescue is None:
            try:
                return write_part(self.path, self.manifest.run_id, table, rows, n)
            except OSError as exc:
                if not is_disk_full(exc):
                    raise
                self._start_rescue(exc, part_path(self.path, table, n))
                self._write_manifest()
        r = self.rescue
        try:
            out = write_part(r.directory, self.manifest.run_id, table, rows, n)
            r.parts_rescued += 1
            r.rows_rescued += len(rows)
            r.rows_by_table[table] = r.rows_by_table.get(table, 0) + len(rows)
            return out
        except OSError:
            r.in_memory.append((table, n, rows))
            return None

    def copy_file(self, src: str | Path, name: str) -> Path:
        """Copy a file into the run directory (temporary name, then rename; rescued like a part on a full disk)."""
        return self._write_or_rescue_bytes(name, Path(src).read_bytes())

    def disk_full_error(self) -> HarnessError:
        """The run's failure on a full disk, with what was kept where (call when `rescue` is set)."""
        # lazy: pyarrow.parquet adds ~50 ms to every verb's start-up (all import the store); only table I/O uses it
        import pyarrow.parquet as pq

        r = self.rescue
        assert r is not None
        rows: dict[str, int] = {}
        for p in sorted(self.path.glob("*/part-*.parquet")):
            try:
                rows[p.parent.name] = rows.get(p.parent.name, 0) + pq.read_metadata(p).num_rows
            except Exception:  # noqa: BLE001 - a damaged part is not kept
                pass
        kept = ", ".join(f"{n} {t} rows" for t, n in sorted(rows.items())) or "no rows"
        moved = ", ".join(f"{n} {t} rows" for t, n in sorted(r.rows_by_table.items()))
        msg = (f"{r.cause}. The run is marked failed. Kept: {kept} in {self.path}; {r.parts_rescued} part(s) "
               f"({r.rows_rescued} rows{': ' + moved if moved else ''}) written to the rescue directory {r.directory}")
        if r.files_rescued:
            msg += f" with {', '.join(r.files_rescued)}"
        if r.files_lost:
            msg += f"; {', '.join(r.files_lost)} fitted on neither disk"
        if r.in_memory:
            msg += (f"; {len(r.in_memory)} part(s) ({r.rows_in_memory} rows) fitted on neither disk and are lost when "
                    "this process ends")
        return HarnessError(msg + f". Free space in {self.path.parent}, move the rescued files into {self.path} "
                                  f"(same names), then `harness report {self.path}`; or set HARNESS_RESCUE_DIR to a disk "
                                  "with room.")

    def update_manifest(self, **changes: Any) -> None:
        self.manifest = replace(self.manifest, **changes)
        self._write_manifest()

    def append(self, table: str, rows: Any) -> Path | None:
        """Append rows (a DataFrame or a list of dicts) as one more parquet part of `table`."""
        rows = nonempty_rows(rows)
        if rows is None:
            return None
        n = self.reserve_part(table)
        return self.write_part(table, rows, n)

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
        return self._write_or_rescue_bytes(name, json.dumps(obj, indent=2, default=str).encode())

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self.rescue is None:
            self.update_manifest(status="complete")
            return
        notes = [*self.manifest.notes, *([f"failed: {exc_type.__name__}: {exc}"] if exc_type is not None else [])]
        if self.rescue is not None and self.rescue.cause not in str(exc):  # the full disk, unless that is the error
            notes.append(f"failed: {self.disk_full_error()}")
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
        # lazy: pandas adds ~0.5 s to every verb's start-up (all import the store); only table reads use it
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
