"""Typed, versioned run records: the manifest every run directory carries, and table upgrades.

SCHEMA_VERSION history (one upgrade step per version, applied on load):
  1 — first version: manifest.json + parquet tables, each row with a `schema_version` column.
      Durations were stored as integer perf_counter_ns values in `*_ns` columns.
  2 — durations in seconds, the base unit (`*_ns` -> `*_s`, float); the manifest gains
      `telemetry` (what the NVML sampler and NVTX ranges did, throttle flags) and
      `cpu_cores_available` (the CPUs this process may use, which a container can cap below
      `cpu_cores`). Upgrade 1->2 converts the columns and fills the new fields (the cores
      available are unknown for an old run: set to `cpu_cores`, and a note says so).

Tables the microbenchmarks write are described in TABLE_COLUMNS; `validate_table` checks one.
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import re

from harness import __version__
from harness.cpuinfo import cpuinfo
from harness.errors import HarnessError
from harness.versioning import check_version, load_versioned, upgrade

SCHEMA_VERSION = 2

# version -> function upgrading a table (pandas DataFrame) from that version to version+1
TABLE_UPGRADES: dict[int, Callable[[Any], Any]] = {}
MANIFEST_UPGRADES: dict[int, Callable[[dict], dict]] = {}


def _git(*args: str) -> str | None:
    try:
        root = Path(__file__).resolve().parents[1]
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def harness_commit() -> tuple[str | None, bool | None]:
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, bool(status)


def cpu_model() -> str:
    return cpuinfo().model


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:60] or "unknown"


def new_run_id(kind: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{slug(kind)}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class RunManifest:
    """Environment facts that travel with the samples (pyperf-style metadata)."""

    run_id: str
    kind: str  # "micro", "load", "engine", "calibration", ...
    machine: str  # fingerprint slug: results/<machine>/<run_id>/
    created_unix_s: float
    command_line: list[str]
    harness_version: str
    harness_commit: str | None
    harness_dirty: bool | None
    host: str
    cpu_model: str
    cpu_cores: int
    python_version: str
    platform: str
    seeds: dict[str, int] = field(default_factory=dict)
    gpu_name: str | None = None
    gpu_driver: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    clocks: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)  # engine name, version, flags
    notes: list[str] = field(default_factory=list)  # e.g. "NVML unavailable: no GPU"
    extra: dict[str, Any] = field(default_factory=dict)
    status: str = "running"  # running | complete | failed
    telemetry: dict[str, Any] = field(default_factory=dict)  # NVML/NVTX state and throttle flags (v2)
    cpu_cores_available: int | None = None  # affinity, may be below cpu_cores (v2)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "manifest") -> "RunManifest":
        d = upgrade_manifest(dict(d), source)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    # facts that must agree before runs may be mixed in one fit
    KEY_FACTS = ("machine", "cpu_model", "gpu_name", "gpu_driver", "schema_version")

    def key_facts(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.KEY_FACTS}


def machine_fingerprint(gpu_name: str | None = None) -> str:
    """results/<machine>/: host CPU model plus GPU name, as a slug."""
    base = slug(cpu_model())
    return f"{slug(gpu_name)}--{base}" if gpu_name else f"cpu--{base}"


def new_manifest(kind: str, *, seeds: dict[str, int] | None = None, gpu_name: str | None = None, **kw: Any) -> RunManifest:
    commit, dirty = harness_commit()
    torch_version = kw.pop("torch_version", None)
    if torch_version is None and "torch" in sys.modules:
        torch_version = getattr(sys.modules["torch"], "__version__", None)
    return RunManifest(
        run_id=kw.pop("run_id", None) or new_run_id(kind),
        kind=kind,
        machine=kw.pop("machine", None) or machine_fingerprint(gpu_name),
        created_unix_s=time.time(),
        command_line=kw.pop("command_line", None) or list(sys.argv),
        harness_version=__version__,
        harness_commit=commit,
        harness_dirty=dirty,
        host=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_cores=os.cpu_count() or 1,
        cpu_cores_available=_cores_available(),
        python_version=platform.python_version(),
        platform=platform.platform(),
        seeds=seeds or {},
        gpu_name=gpu_name,
        torch_version=torch_version,
        extra={"user": _user(), **kw.pop("extra", {})},
        **kw,
    )


def _cores_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "unknown"


def upgrade_manifest(d: dict[str, Any], source: str) -> dict[str, Any]:
    """Bring a manifest to SCHEMA_VERSION, one step per version; refuse newer ones (harness.versioning)."""
    return load_versioned(d, SCHEMA_VERSION, MANIFEST_UPGRADES, source, what="manifest",
                          fix="this is not a harness manifest; give results/<machine>/<run_id>/")


def upgrade_table(df: Any, source: str) -> Any:
    """Bring a loaded table to SCHEMA_VERSION, one step per version; refuse newer files."""
    if "schema_version" not in df.columns:
        raise HarnessError(f"{source}: table has no schema_version column; it was not written by this harness.")
    if len(df) == 0:
        return df
    try:
        low, high = int(df["schema_version"].min()), int(df["schema_version"].max())
    except (TypeError, ValueError):
        raise HarnessError(f"{source}: schema_version column is not integer; it was not written by this harness.") from None
    check_version(high, SCHEMA_VERSION, source)
    check_version(low, SCHEMA_VERSION, source)
    df = upgrade(df, low, SCHEMA_VERSION, TABLE_UPGRADES, source)
    df["schema_version"] = SCHEMA_VERSION
    return df


# ---- upgrade steps: one per version, registered by the version they upgrade FROM ----


def _table_1_to_2(df: Any) -> Any:
    """v1 stored durations as integer nanoseconds in `*_ns` columns; v2 stores float seconds in `*_s`."""
    renames = {c: c[: -len("_ns")] + "_s" for c in df.columns if c.endswith("_ns")}
    for old, new in renames.items():
        df[new] = df[old].astype("float64") / 1e9
    return df.drop(columns=list(renames))


def _manifest_1_to_2(d: dict[str, Any]) -> dict[str, Any]:
    d.setdefault("telemetry", {})
    if d.get("cpu_cores_available") is None:
        d["cpu_cores_available"] = d.get("cpu_cores")
    d["notes"] = [*d.get("notes", []), "upgraded from schema_version 1: cpu_cores_available assumed = cpu_cores"]
    return d


TABLE_UPGRADES[1] = _table_1_to_2
MANIFEST_UPGRADES[1] = _manifest_1_to_2


# ---- tables written by the microbenchmarks (and the importers, which fill the same columns) ----

# name -> {column: pandas dtype kind ("f" float, "i" integer, "O" text/object, "b" bool)}
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "micro_cases": {
        "case_id": "O", "suite": "O", "case": "O", "backend": "O", "device": "O", "dtype": "O",
        "params_json": "O", "n_samples": "i", "inner_reps": "i",
        "median_s": "f", "p10_s": "f", "p90_s": "f", "mean_s": "f", "min_s": "f", "cv": "f",
        "useful_flops": "f", "padded_flops": "f", "useful_bytes": "f", "padded_bytes": "f",
        "flops_per_s": "f", "bytes_per_s": "f", "mfu": "f", "mbu": "f",
        "peak_flops_per_s": "f", "peak_bytes_per_s": "f", "peak_source": "O",
        "timer": "O", "cache_state": "O", "unstable": "b", "valid": "b", "flags_json": "O", "source": "O",
    },
    "micro_samples": {"case_id": "O", "rep": "i", "time_s": "f", "inner_reps": "i"},
    "micro_skips": {"suite": "O", "case": "O", "reason": "O"},
    "telemetry_nvml": {
        "t_s": "f", "gpu_index": "i", "sm_clock_hz": "f", "mem_clock_hz": "f", "power_w": "f",
        "temperature_c": "f", "clock_event_reasons": "i",
    },
}


def validate_table(name: str, df: Any, source: str = "table") -> None:
    """Check that `df` has every column of TABLE_COLUMNS[name] with the right kind; raise naming the first misfit."""
    if name not in TABLE_COLUMNS:
        raise HarnessError(f"{source}: no table schema named {name!r}; known: {', '.join(TABLE_COLUMNS)}.")
    want = TABLE_COLUMNS[name]
    missing = [c for c in want if c not in df.columns]
    if missing:
        raise HarnessError(f"{source}: table {name!r} lacks column(s) {missing}; it was written by another tool or version.")
    for col, kind in want.items():
        got = df[col].dtype.kind
        ok = got == kind or (kind == "f" and got in "iuf") or (kind == "O" and got in "OSU") or (kind == "i" and got in "iu")
        if not ok and not (len(df) and df[col].isna().all()):
            raise HarnessError(f"{source}: table {name!r} column {col!r} has dtype {df[col].dtype}, expected kind {kind!r}.")
