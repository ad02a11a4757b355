"""The nightly history: constants of every night as a parquet dataset partitioned by machine and date.

Layout (hive partitioning, readable by pandas.read_parquet, pyarrow.dataset, DuckDB, Spark):

    history/machine=<machine>/date=<YYYY-MM-DD>/<run_id>.parquet

One file per run, written under a temporary name and renamed, never overwritten (appending the same
run twice is refused). Columns: COLUMNS of constants.py plus run_id, created_unix_s, kind,
schema_version. HISTORY_VERSION history (harness.versioning; newer files are refused):
  1 — first version; the version column was named `history_version`.
  2 — the version column is `schema_version`, as in every harness file; files of version 1 are read
      with their `history_version` taken as `schema_version`.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.versioning import VERSION_FIELD, check_version, upgrade

HISTORY_VERSION = 2
HISTORY_UPGRADES = {1: lambda df: df}  # 1 -> 2: the version column renamed only (done on load)
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def history_file(history_dir: str | Path, machine: str, created_unix_s: float, run_id: str) -> Path:
    for what, v in (("machine", machine), ("run_id", run_id)):
        if not _SAFE.match(v):
            raise HarnessError(f"history: {what} {v!r} has characters a partition path cannot hold; use letters, digits, . _ -.")
    date = time.strftime("%Y-%m-%d", time.gmtime(created_unix_s))
    return Path(history_dir) / f"machine={machine}" / f"date={date}" / f"{run_id}.parquet"


def append_history(history_dir: str | Path, rows: list[dict[str, Any]], *, machine: str, run_id: str,
                   created_unix_s: float, kind: str = "micro") -> Path | None:
    """Write one run's constants; returns the file, or None when there were no constants."""
    # lazy: pandas and pyarrow.dataset add ~0.5 s each to nightly's start-up; only the history table uses them
    import pandas as pd

    if not rows:
        return None
    if not (isinstance(created_unix_s, (int, float)) and math.isfinite(created_unix_s) and created_unix_s > 0):
        raise HarnessError(f"history: created_unix_s must be a positive time, got {created_unix_s!r}.")
    out = history_file(history_dir, machine, created_unix_s, run_id)
    if out.exists():
        raise HarnessError(f"history already holds run {run_id} ({out}); a run is appended once.")
    out.parent.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df["run_id"] = run_id
    df["created_unix_s"] = float(created_unix_s)
    df["kind"] = kind
    df[VERSION_FIELD] = HISTORY_VERSION
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, out)
    return out


def contains_run(history_dir: str | Path, run_id: str) -> bool:
    return any(Path(history_dir).glob(f"machine=*/date=*/{run_id}.parquet"))


def load_history(history_dir: str | Path, machine: str | None = None, constants: list[str] | None = None,
                 since_unix_s: float | None = None) -> Any:
    """The history as one DataFrame (machine and date columns from the partitions), oldest first."""
    # lazy: pandas and pyarrow.dataset add ~0.5 s each to nightly's start-up; only the history table uses them
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds

    root = Path(history_dir)
    if not root.is_dir() or not any(root.glob("machine=*/date=*/*.parquet")):
        return pd.DataFrame(columns=["machine", "date", "run_id", "created_unix_s", "constant", "value", "unit", "better",
                                     "source", "n_samples", "low", "high", "kind", VERSION_FIELD])
    opts = dict(format="parquet", partitioning="hive", exclude_invalid_files=True, ignore_prefixes=[".", "_"])
    dataset = ds.dataset(str(root), **opts)
    # files of different versions have different columns (history_version -> schema_version): read their union
    schema = pa.unify_schemas([dataset.schema, *(f.physical_schema for f in dataset.get_fragments())])
    dataset = ds.dataset(str(root), schema=schema, **opts)
    flt = None
    for cond in ((ds.field("machine") == machine) if machine else None,
                 ds.field("constant").isin(constants) if constants else None,
                 (ds.field("created_unix_s") >= since_unix_s) if since_unix_s is not None else None):
        if cond is not None:
            flt = cond if flt is None else flt & cond
    df = dataset.to_table(filter=flt).to_pandas()
    if "history_version" in df.columns:  # version-1 files
        old = df.pop("history_version")
        df[VERSION_FIELD] = df[VERSION_FIELD].fillna(old) if VERSION_FIELD in df.columns else old
    if len(df):
        versions = df[VERSION_FIELD].astype("int64")
        check_version(int(versions.max()), HISTORY_VERSION, f"history {root}")
        check_version(int(versions.min()), HISTORY_VERSION, f"history {root}")
        df = upgrade(df, int(versions.min()), HISTORY_VERSION, HISTORY_UPGRADES, f"history {root}")
        df[VERSION_FIELD] = HISTORY_VERSION
    for col in ("machine", "date"):
        if col in df.columns:
            df[col] = df[col].astype(str)
    return df.sort_values(["created_unix_s", "run_id", "constant"], kind="stable").reset_index(drop=True)
