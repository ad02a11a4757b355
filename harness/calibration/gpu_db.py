"""The GPU calibration database that ships with the project: calibration/gpus/<gpu>/<family>.json.

One entry per GPU (its spec name, as `harness specs gpus` prints it) and kernel family: a calibration
file (harness/calibration/file.py, schema 3) whose `provenance` says where the constants came from
(imported kernel data or our own microbenchmarks, device, driver, torch/CUDA, engine and version,
dates, run ids, command). `pick` is what the model, the twin and `harness predict` use by default;
`file_entry` writes an entry (`harness calibrate RUNS --into-db`, `harness micro import-device`,
`harness micro import-aic --into-db`). A GPU without an entry plans on its datasheet peaks at the
chapter's default efficiency, labelled by `uncalibrated_label`.

The directory is the repository's calibration/gpus/ unless HARNESS_CALIBRATION_DB or `db_dir` names
another.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from harness.calibration.apply import DEFAULT_EFFICIENCY, MeasuredConstants
from harness.calibration.file import load_calibration, save_calibration
from harness.calibration.record import SOURCE_KINDS, CalibrationRecord, Provenance
from harness.errors import HarnessError
from harness.model.calibration import ConstantProvenance, LinkConstants, Which
from harness.model.stages import Efficiency

DB_ENV = "HARNESS_CALIBRATION_DB"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DB_DIR = REPO_ROOT / "calibration" / "gpus"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# entries are summaries and compressed kernel grids (about 300-450 KiB for an engine's full aiconfigurator tables); a
# bigger one means raw rows slipped in
ENTRY_SIZE_WARN_BYTES = 1024 * 1024


def db_dir(given: str | Path | None = None) -> Path:
    """The database directory: `given`, else $HARNESS_CALIBRATION_DB, else the repository's calibration/gpus/."""
    if given is not None:
        return Path(given)
    env = os.environ.get(DB_ENV)
    return Path(env) if env else DEFAULT_DB_DIR


def shown_path(p: Path) -> str:
    """A path as the user reads it: relative to the repository when inside it."""
    try:
        return str(p.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(p)


def _inside(p: Path, root: Path) -> bool:
    try:
        p.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _check_gpu(gpu: str) -> str:
    from harness.specs.gpus import get_gpu

    return get_gpu(gpu).name  # an unknown name is a HarnessError listing the catalog


def _check_family(family: str) -> str:
    if not isinstance(family, str) or not _SAFE_NAME.match(family):
        raise HarnessError(f"kernel family {family!r}: a family is one file name of letters, digits and . _ + - "
                           "(e.g. aic-trtllm-1.3.0rc20, cuda).")
    return family


def entry_path(gpu: str, family: str, directory: str | Path | None = None) -> Path:
    return db_dir(directory) / _check_gpu(gpu) / f"{_check_family(family)}.json"


@dataclass(frozen=True)
class DbEntry:
    """One entry of the database: the constants of one GPU and kernel family, with where they came from."""

    path: Path
    gpu: str
    family: str
    record: CalibrationRecord
    provenance: Provenance
    age_days: int
    note: str = ""  # why this entry was picked when not the family asked for

    @property
    def date(self) -> str:
        """ISO date the entry stands for (measured, else filed)."""
        return self.provenance.date

    @property
    def constants(self) -> MeasuredConstants:
        """The entry as the model's `harness.model.calibration.Calibration`."""
        return MeasuredConstants(self.record, shown_path(self.path))

    def describe(self) -> str:
        """One line: path, source, date, age ("calibration/gpus/h200-sxm/aic-trtllm-1.3.0rc20.json, imported kernel
        data (aiconfigurator 0.12.0), 2026-12-06, 0 days old")."""
        age = "1 day" if self.age_days == 1 else f"{self.age_days} days"
        note = f"; {self.note}" if self.note else ""
        return f"{shown_path(self.path)}, {self.provenance.source_kind} ({self.provenance.source}), {self.date}, {age} old{note}"


def load_entry(path: str | Path, today: date | None = None) -> DbEntry:
    """Read and check one entry: a valid calibration file with provenance, filed under its own GPU and family."""
    p = Path(path)
    fix = (f"restore it (`git checkout -- {shown_path(p)}`) or file it again (`harness calibrate RUNS --into-db`), "
           "or remove it")
    try:
        rec = _load_record(p)
    except HarnessError as exc:
        if str(exc).endswith("upgrade the harness."):  # written by a newer harness: the entry is fine, the code is old
            raise HarnessError(f"GPU calibration database: entry {shown_path(p)}: {exc}".replace(f"{p}: ", "")) from None
        raise HarnessError(f"GPU calibration database: entry {shown_path(p)} cannot be used: {exc} To use the database, "
                           f"{fix}.") from None
    prov = rec.provenance
    if prov is None:
        raise HarnessError(f"GPU calibration database: entry {shown_path(p)} has no provenance (where its constants came "
                           f"from); an entry must say it. {fix[0].upper()}{fix[1:]}.")
    gpu, family = p.parent.name, p.stem
    if prov.gpu != gpu or prov.family != family:
        raise HarnessError(f"GPU calibration database: entry {shown_path(p)} is filed as {gpu}/{family} but its provenance "
                           f"says {prov.gpu}/{prov.family}; {fix}.")
    age = ((today or date.today()) - date.fromisoformat(prov.date)).days
    return DbEntry(p, gpu, family, rec, prov, age)


def _load_record(p: Path) -> CalibrationRecord:
    """The entry's record, parsed once per file version (path, size, modification time): an entry with kernel grids is
    half a megabyte of JSON, and every prediction picks one."""
    try:
        st = p.stat()
    except OSError:
        return load_calibration(p)  # says the file does not exist
    return _load_record_at(str(p.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _load_record_at(path: str, size: int, mtime_ns: int) -> CalibrationRecord:
    return load_calibration(path)


def entries(gpu: str | None = None, *, db_dir: str | Path | None = None, today: date | None = None) -> list[DbEntry]:
    """Every entry (of `gpu` when given), newest first (see `pick` for the order)."""
    root = _db(db_dir)
    if gpu is not None:
        folders = [root / _check_gpu(gpu)]
    else:
        folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    found = [load_entry(f, today) for d in folders if d.is_dir() for f in sorted(d.glob("*.json"))]
    return sorted(found, key=_newest_first)


def _db(given: str | Path | None) -> Path:
    return db_dir(given)


def _newest_first(e: DbEntry) -> tuple:
    # newest date first; on one date our own measurements before imported data, then by family name
    rank = {"our microbenchmarks": 0, "imported kernel data": 1}.get(e.provenance.source_kind, 2)
    return (-date.fromisoformat(e.date).toordinal(), -date.fromisoformat(e.provenance.filed_date).toordinal(), rank,
            e.family)


def _family_matches(entry_family: str, wanted: str) -> bool:
    return entry_family == wanted or entry_family.startswith(wanted + "-")


def pick(gpu: str, family: str | None = None, *, db_dir: str | Path | None = None,
         today: date | None = None) -> DbEntry | None:
    """The entry for GPU spec `gpu`: of kernel family `family` when there is one (an exact name, or a prefix such as
    "aic-vllm" for "aic-vllm-0.24.0"; the newest of several), else the newest entry of the GPU; None when the GPU has
    none. Newest: the latest measured (else filed) date; on one date our own measurements come before imported data,
    then family names in order. An unknown GPU, a damaged entry or one newer than this harness is a HarnessError."""
    found = entries(gpu, db_dir=db_dir, today=today)
    if not found:
        return None
    if family is None:
        return found[0]
    _check_family(family)
    same = [e for e in found if _family_matches(e.family, family)]
    if same:
        return same[0]
    have = ", ".join(e.family for e in found)
    return replace(found[0], note=f"no {family} entry for {gpu} (it has {have}); the newest is used")


def uncalibrated_label(gpu: str, *, db_dir: str | Path | None = None) -> str:
    """The label of a GPU planned without an entry: its datasheet peaks at the chapter's default efficiency."""
    where = shown_path(_db(db_dir) / gpu)
    return (f"uncalibrated: {gpu} datasheet peaks at the chapter's default {DEFAULT_EFFICIENCY:.0%} efficiency "
            f"(Chapter 9, §9.2.3; no entry in {where}/)")


def file_entry(rec: CalibrationRecord, *, db_dir: str | Path | None = None, replace_newer: bool = False) -> DbEntry:
    """Write `rec` (with its provenance) as calibration/gpus/<gpu>/<family>.json; returns the entry.

    An entry of the same GPU and family is replaced when the new one is as new or newer; an older one does not
    overwrite a newer one unless `replace_newer` (the old file stays in git history either way).
    """
    prov = rec.provenance
    if prov is None:
        raise HarnessError("a calibration filed into the GPU database needs its provenance (where the runs came from); "
                           "file it with `harness calibrate RUNS --into-db`, which records it.")
    if prov.source_kind not in SOURCE_KINDS:
        raise HarnessError(f"provenance.source_kind {prov.source_kind!r} is not one of {', '.join(SOURCE_KINDS)}.")
    path = entry_path(prov.gpu, prov.family, db_dir)
    if prov.source_kind == "synthetic" and _inside(path, DEFAULT_DB_DIR):
        raise HarnessError("these runs are synthetic (generated from known constants, not measured); the database that "
                           f"ships with the project takes measurements only. File them into a directory of your own "
                           f"(--into-db DIR) to test with.")
    if path.exists() and not replace_newer:
        try:
            old = load_entry(path)
        except HarnessError:
            old = None  # a damaged entry is replaced by a good one
        if old is not None and old.date > prov.date:
            raise HarnessError(f"{shown_path(path)} holds constants from {old.date}, newer than these ({prov.date}); "
                               "they are kept. Pass --replace to overwrite them anyway.")
    save_calibration(rounded(rec), path, one_line_points=True)
    size = path.stat().st_size
    if size > ENTRY_SIZE_WARN_BYTES:
        import sys

        print(f"warning: {shown_path(path)} is {size / 1024:.0f} KiB; a database entry should hold summary constants, "
              "curves and compressed kernel grids, not raw rows.", file=sys.stderr)
    return load_entry(path)


SIGNIFICANT_DIGITS = 5


def _round(x: Any) -> Any:
    if isinstance(x, float) and math.isfinite(x) and not x.is_integer():  # sizes, batches, token counts stay exact
        return float(f"{x:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(x, dict):  # times of day are identities, not measurements: kept whole; kernel grids are stored at
        # their own step (harness.model.kernel_tables_codec)
        return {k: v if k.endswith("_unix_s") or k == "kernel_tables" else _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


def rounded(rec: CalibrationRecord) -> CalibrationRecord:
    """`rec` with every number at SIGNIFICANT_DIGITS significant digits: an entry is a summary (no measurement here is
    known to 1e-5), and 17-digit floats would triple its size in git."""
    return CalibrationRecord.from_dict(_round(rec.to_dict()))


# ---- the database as the model's Calibration protocol, one entry per scenario GPU ----


@dataclass(frozen=True)
class DatabaseConstants:
    """Picked entries, one per GPU, as one `harness.model.calibration.Calibration`; GPUs without one stay at the
    scenario's (datasheet default) efficiency, and `source` names them uncalibrated."""

    picked: dict[str, DbEntry]
    uncalibrated: dict[str, str]  # gpu -> uncalibrated_label

    @property
    def source(self) -> str:
        parts = [f"{g}: {e.describe()}" for g, e in self.picked.items()]
        parts += [f"{g}: {label}" for g, label in self.uncalibrated.items()]
        return "; ".join(parts)

    @property
    def machine(self) -> str:
        return ", ".join(dict.fromkeys(e.record.machine for e in self.picked.values()))

    def efficiency(self, gpu: str, decode_batch: int, prefill_tokens: int, dtype: str, which: Which = "value",
                   decode_context_tokens: float | None = None) -> Efficiency | None:
        e = self.picked.get(gpu)
        return None if e is None else e.constants.efficiency(gpu, decode_batch, prefill_tokens, dtype, which,
                                                             decode_context_tokens)

    def _link_owner(self, name: str | None) -> DbEntry | None:
        return next((e for e in self.picked.values() if e.constants.link_choice(name) is not None), None)

    def link(self, name: str | None, which: Which = "value") -> LinkConstants | None:
        owner = self._link_owner(name)
        return None if owner is None else owner.constants.link(name, which)

    def provenance(self, gpus: Sequence[str], link_name: str | None, decode_batch: int, prefill_tokens: int, dtype: str,
                   link_default: LinkConstants | None,
                   decode_context_tokens: float | None = None) -> list[ConstantProvenance]:
        rows: list[ConstantProvenance] = []
        for g in gpus:
            e = self.picked.get(g)
            if e is not None:
                rows += e.constants.provenance([g], None, decode_batch, prefill_tokens, dtype, None, decode_context_tokens)
                continue
            for q in ("compute_efficiency", "bandwidth_efficiency"):
                rows.append(ConstantProvenance(constant=f"{g}.{q}", origin="datasheet default", value=DEFAULT_EFFICIENCY,
                                               low=None, high=None, at=None,
                                               source=self.uncalibrated.get(g, uncalibrated_label(g)), run_ids=()))
        if link_name is not None:
            owner = self._link_owner(link_name) or next(iter(self.picked.values()))
            rows += owner.constants.provenance([], link_name, decode_batch, prefill_tokens, dtype, link_default,
                                               decode_context_tokens)
        return rows


def for_gpus(gpus: Sequence[str], family: str | None = None, *, db_dir: str | Path | None = None,
             today: date | None = None) -> DatabaseConstants | None:
    """The picked entries of `gpus` as one Calibration, or None when none of them has an entry."""
    picked: dict[str, DbEntry] = {}
    missing: dict[str, str] = {}
    for g in dict.fromkeys(gpus):
        e = pick(g, family, db_dir=db_dir, today=today)
        if e is None:
            missing[g] = uncalibrated_label(g, db_dir=db_dir)
        else:
            picked[g] = e
    return DatabaseConstants(picked, missing) if picked else None


def summary_rows(found: Sequence[DbEntry]) -> list[dict[str, Any]]:
    """One JSON-able row per entry (`harness calibrate --list-db --json`)."""
    return [{"path": shown_path(e.path), "gpu": e.gpu, "family": e.family, "date": e.date, "age_days": e.age_days,
             "describe": e.describe(), "provenance": e.provenance.to_dict(),
             "curves": len(e.record.curves), "links": len(e.record.links), "collectives": len(e.record.collectives),
             "kernel_grids": grid_count(e.record.kernel_tables), "bytes": e.path.stat().st_size} for e in found]


def grid_count(tables: Any) -> int:
    """Kernel grids an entry carries (GEMM dtypes, attention shapes, all-reduce sizes, MoE and MLA shapes); 0 without."""
    if tables is None:
        return 0
    return sum(len(getattr(tables, op)) for op in ("gemm", "decode_attention", "prefill_attention", "allreduce", "moe",
                                                   "mla_decode", "mla_prefill"))
