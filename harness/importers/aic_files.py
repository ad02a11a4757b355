"""aiconfigurator's kernel data on disk: where it is, which versions it holds, and the one reader of its parquet tables.

The `aiconfigurator-core` wheel (PyPI; `pip install -e .[aic]`) ships per-operation measurements under
`aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/<table>.parquet`. Both users of that data read it
here: the importer that files it as micro runs (harness.importers.aic) and the builder of the step model's kernel
tables (harness.importers.aic_grids, read by `harness predict --calibration aic` and filed into database entries).

`read_table` checks the columns a table must have (REQUIRED; a table without one is refused naming it), fills the
optional ones the 0.12.0 wheel may leave out with the value their absence means (OPTIONAL), and turns an unreadable
file into a HarnessError. `latency` stays in milliseconds, as aiconfigurator writes it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Sequence

from harness.errors import HarnessError

INSTALL_HINT = "pip install -e '.[aic]' (or pip install 'aiconfigurator==0.12.0')"

# columns each table must have (the schema as the 0.12.0 wheel writes it)
REQUIRED: dict[str, tuple[str, ...]] = {
    "gemm_perf": ("device", "gemm_dtype", "m", "n", "k", "latency"),
    "context_attention_perf": ("device", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                               "kv_cache_dtype", "step", "latency"),
    "generation_attention_perf": ("device", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                                  "kv_cache_dtype", "step", "latency"),
    "moe_perf": ("device", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                 "moe_ep_size", "distribution", "latency"),
    "nccl_perf": ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"),
    "custom_allreduce_perf": ("device", "allreduce_dtype", "num_gpus", "message_size", "latency"),
    "generation_mla_perf": ("num_heads", "batch_size", "isl", "tp_size", "step", "kv_cache_dtype", "latency"),
    "context_mla_perf": ("num_heads", "batch_size", "isl", "tp_size", "step", "kv_cache_dtype", "latency"),
    "computescale_perf": ("m", "k", "quant_dtype", "latency"),
}
# columns a table may lack, with what their absence means
OPTIONAL: dict[str, Any] = {"window_size": 0, "kernel_source": "", "attn_dtype": "bfloat16"}


def installed_data_root() -> Path:
    """systems/data of the installed aiconfigurator_core package (found without importing it)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise HarnessError(f"aiconfigurator is not installed (its aiconfigurator-core wheel holds the kernel measurements): "
                           f"{INSTALL_HINT}, or give the path of its systems/data directory.")
    return Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"


def is_system(d: Path) -> bool:
    return any(d.glob("*/*/*/*.parquet"))


def data_root(path: str | Path | None = None) -> Path:
    """The systems/data directory: of the installed package, or the one `path` names (the package directory, its
    systems/ or systems/data/ directory, or one system's data/<system>/ directory's parent)."""
    if path is None:
        root = installed_data_root()
    else:
        p = Path(path)
        cands = [p / "systems" / "data", p / "data", p, p / "aiconfigurator_core" / "systems" / "data"]
        root = next((c for c in cands if c.is_dir() and any(is_system(d) for d in c.iterdir() if d.is_dir())), None)
        if root is None:
            if p.is_dir() and is_system(p):
                return p.parent
            raise HarnessError(f"{str(p)!r} holds no aiconfigurator kernel data (no <system>/<op>/<engine>/<version>/"
                               "*.parquet below it); give aiconfigurator_core's systems/data directory, or leave the path "
                               "out to read the installed package.")
    if not root.is_dir():
        raise HarnessError(f"aiconfigurator kernel data: {root} does not exist; reinstall aiconfigurator-core.")
    return root


def systems(root: Path) -> list[str]:
    return sorted(d.name for d in root.iterdir() if d.is_dir() and is_system(d))


def version_key(v: str) -> tuple:
    """Sort key of a version folder name (PEP 440 where it parses: 1.3.0rc9 < 1.3.0rc20 < 1.3.0)."""
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(v))
    except InvalidVersion:
        return (0, v)


def versions(root: Path, system: str, op: str, engine: str, table: str) -> list[str]:
    """Versions of `engine` holding `table` for `op`, newest first (a reuse.yaml-only folder holds no data)."""
    d = root / system / op / engine
    if not d.is_dir():
        return []
    have = [v.name for v in d.iterdir() if (v / f"{table}.parquet").is_file()]
    return sorted(have, key=version_key, reverse=True)


def table_path(root: Path, system: str, op: str, engine: str, table: str, version: str | None = None) -> Path | None:
    """The `table` of `op` for `engine`: of `version` when it holds one, else the newest; None when none does."""
    vs = versions(root, system, op, engine, table)
    if not vs:
        return None
    use = version if version in vs else vs[0]
    return root / system / op / engine / use / f"{table}.parquet"


def read_table(path: Path, table: str, columns: Sequence[str] | None = None):
    """aiconfigurator's `table` at `path` as a DataFrame (of `columns` when given, else all): the required columns
    checked, absent optional ones filled (OPTIONAL), an unreadable file a HarnessError naming it."""
    import pandas as pd
    import pyarrow.parquet as pq

    try:
        have = pq.read_schema(path).names
        want = [c for c in (columns or have) if c in have]
        df = pd.read_parquet(path, columns=want)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        first = str(exc).splitlines()[0][:160] if str(exc) else "unreadable"
        raise HarnessError(f"aiconfigurator kernel data: {path} cannot be read as parquet ({type(exc).__name__}: {first}); "
                           "reinstall aiconfigurator-core.") from None
    needed = [c for c in REQUIRED.get(table, ()) if columns is None or c in columns]
    needed += [c for c in (columns or ()) if c not in needed and c not in OPTIONAL]
    missing = [c for c in needed if c not in have]
    if missing:
        raise HarnessError(f"aiconfigurator kernel data: {path} lacks column(s) {missing} of its {table} table (has "
                           f"{', '.join(map(str, have))}); this aiconfigurator version writes another schema — update "
                           "harness/importers/aic_files.py, or install aiconfigurator 0.12.0.")
    for c in columns or ():
        if c not in df.columns and c in OPTIONAL:
            df[c] = OPTIONAL[c]
    return df


def package_version() -> str | None:
    """The installed aiconfigurator-core (else aiconfigurator) version, or None."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("aiconfigurator-core", "aiconfigurator"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def database_name(root: Path) -> str:
    """How a source says where its data came from: "aiconfigurator 0.12.0" for the installed package's data, else
    "aiconfigurator data at PATH"."""
    try:
        installed = root.resolve() == installed_data_root().resolve()
    except HarnessError:
        installed = False
    ver = package_version() if installed else None
    return f"aiconfigurator {ver}" if ver else f"aiconfigurator data at {root}"
