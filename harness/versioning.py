"""One mechanism for the version of every file the harness writes: one field, step-wise upgrades, newer refused.

Every versioned file (manifest, parquet tables, calibration JSON, workload artifacts, scenarios, engine
configs, the nightly history, the run sidecars summary.json / plan.json / loop_report.json) carries its
version in one field, ``schema_version``. A reader calls ``load_versioned(data, current, upgrades,
source)``: ``upgrades[n]`` turns a version-n document into version n+1 (asv's ``update_to_N``), applied
in order; a document newer than ``current`` is refused with "... newer than this harness understands;
upgrade the harness". Writers call ``stamp_version(obj, current)``.

Files written before the field name was unified used ``format_version`` (calibration, workload
artifacts) or ``history_version`` (nightly history): ``legacy_fields`` names the old field for a reader,
which takes its value and drops it, and the format's upgrade step from that version records the rename.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, TypeVar

from harness.errors import HarnessError

VERSION_FIELD = "schema_version"

T = TypeVar("T")
Upgrades = Mapping[int, Callable[[Any], Any]]


def version_problem(v: Any, current: int, field: str = VERSION_FIELD) -> str | None:
    """Why `v` is not a version this harness can read (None when it is): not an integer, below 1, or newer."""
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{field} must be an integer >= 1, got {v!r}"
    if v < 1:
        return f"{field} must be an integer >= 1, got {v}"
    if v > current:
        return f"{field} {v} is newer than this harness understands ({current}); upgrade the harness"
    return None


def check_version(v: Any, current: int, source: str, fix: str = "", field: str = VERSION_FIELD) -> int:
    """`v` when readable; else a HarnessError naming `source`, the field, the value and the fix."""
    problem = version_problem(v, current, field)
    if problem is not None:
        tail = "" if problem.endswith("upgrade the harness") or not fix else f"; {fix}"
        raise HarnessError(f"{source}: {problem}{tail}.")
    return v


def upgrade(obj: T, version: int, current: int, upgrades: Upgrades, source: str) -> T:
    """Apply upgrades[version], upgrades[version+1], ... up to `current` (each returns the upgraded object)."""
    v = version
    while v < current:
        step = upgrades.get(v)
        if step is None:  # a harness bug: a version was bumped without its upgrade step
            raise HarnessError(f"{source}: no upgrade step from {VERSION_FIELD} {v} to {v + 1} in this harness; "
                               "report this as a bug and rewrite the file with the current harness.")
        obj = step(obj)
        v += 1
    return obj


def read_version(data: Mapping[str, Any], *, legacy_fields: Iterable[str] = (),
                 default: int | None = None) -> tuple[Any, str]:
    """The version a document states and the field it was in (``schema_version``, else a legacy field, else `default`)."""
    if VERSION_FIELD in data:
        return data[VERSION_FIELD], VERSION_FIELD
    for name in legacy_fields:
        if name in data:
            return data[name], name
    return default, VERSION_FIELD


def load_versioned(data: Any, current: int, upgrades: Upgrades, source: str, *, legacy_fields: Iterable[str] = (),
                   default: int | None = None, fix: str = "", what: str = "file") -> dict[str, Any]:
    """`data` (a parsed JSON/TOML document) brought to version `current`, with ``schema_version`` set.

    `default` is the version assumed when the document states none (hand-written inputs such as scenarios
    omit it: they are at the current version; sidecars written before they were versioned are version 1);
    with `default` None a missing version is refused. `fix` says how to make a good file.
    """
    if not isinstance(data, Mapping):
        raise HarnessError(f"{source}: the {what} must be a table of fields at the top level, got {type(data).__name__}"
                           f"{'; ' + fix if fix else ''}.")
    legacy_fields = tuple(legacy_fields)
    v, field = read_version(data, legacy_fields=legacy_fields, default=default)
    if v is None:
        raise HarnessError(f"{source}: {VERSION_FIELD} is missing; this {what} was not written by this harness"
                           f"{'; ' + fix if fix else ''}.")
    check_version(v, current, source, fix, field)
    d = {k: val for k, val in data.items() if k not in legacy_fields}
    d[VERSION_FIELD] = v
    d = upgrade(d, v, current, upgrades, source)
    d[VERSION_FIELD] = current
    return d


def stamp_version(obj: Mapping[str, Any], current: int) -> dict[str, Any]:
    """A copy of `obj` with ``schema_version`` = `current` first (for a writer)."""
    return {VERSION_FIELD: current, **{k: v for k, v in obj.items() if k != VERSION_FIELD}}
