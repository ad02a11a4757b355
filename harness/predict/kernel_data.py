"""`--calibration aic`: the step model's kernel tables read from the installed aiconfigurator (or a folder given), cached.

The tables are built by harness.importers.aic_grids (read through harness.importers.aic_files, the one reader of
aiconfigurator's parquet files); this module maps our GPU names to aiconfigurator's systems and keeps built tables in a
disk cache between runs. The calibration database's entries carry the same tables (`kernel_tables`), so the default
`--calibration auto` needs none of this.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from functools import lru_cache
from pathlib import Path

from harness.errors import HarnessError
from harness.importers.aic_files import data_root as aic_data_root
from harness.importers.aic_files import package_version
from harness.importers.aic_grids import build_tables
from harness.model.kernel_tables import KernelTables

# our GPU spec name -> aiconfigurator's system name (only parts whose datasheet is the same product)
AIC_SYSTEMS = {"h200-sxm": "h200_sxm", "h100-sxm": "h100_sxm", "a100-80gb-sxm": "a100_sxm", "b200": "b200_sxm"}


def aic_system(gpu: str) -> str:
    try:
        return AIC_SYSTEMS[gpu]
    except KeyError:
        raise HarnessError(f"no imported kernel data maps to GPU {gpu!r}; aiconfigurator's systems are known for "
                           f"{', '.join(AIC_SYSTEMS)}. Use the calibration database or the datasheet instead.") from None


CACHE_FORMAT = 3  # bump when the tables built here change


def _cache_file(root: Path, gpu: str, engine: str, version: str | None) -> Path | None:
    """Where built tables are kept between runs: $XDG_CACHE_HOME (or ~/.cache)/llm-dist-harness/kernel-tables/, named by
    the data folder's identity (path, modification time) so new data is never read from an old cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    try:
        stamp = f"{root.resolve()}|{root.stat().st_mtime_ns}|{gpu}|{engine}|{version}|{CACHE_FORMAT}|{package_version()}"
    except OSError:
        return None
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return Path(base) / "llm-dist-harness" / "kernel-tables" / f"{gpu}-{engine}-{digest}.pickle"


@lru_cache(maxsize=16)
def load_aic_tables(gpu: str, engine: str, version: str | None = None, data_root: str | None = None) -> KernelTables:
    """The step model's tables for `gpu` and `engine` from aiconfigurator's kernel data (newest version folders); built
    once and cached on disk (a derived copy, rebuilt when the data folder changes)."""
    data = aic_data_root(data_root)
    root = data / aic_system(gpu)
    cache = _cache_file(root, gpu, engine, version) if root.is_dir() else None
    if cache is not None and cache.is_file():
        try:
            with open(cache, "rb") as f:
                got = pickle.load(f)
            if isinstance(got, KernelTables):
                return got
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            pass  # a stale or damaged cache is rebuilt below
    tables = build_tables(data, aic_system(gpu), gpu, engine, version)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                pickle.dump(tables, f, protocol=pickle.HIGHEST_PROTOCOL)
            tmp.replace(cache)
        except OSError:
            pass  # no cache: the next run builds the tables again
    return tables


