"""Where the step model's constants come from, chosen once per prediction and said in its output.

`--calibration` picks (default `auto`):

| choice | source | label |
|---|---|---|
| `auto` | the GPU's entry in the calibration database (calibration/gpus/, harness.calibration.gpu_db) when it has one, else the installed aiconfigurator's kernel tables for the GPU and engine, else the datasheet | as below |
| `db` | the database entry (refused when the GPU has none) | its kind: imported kernel data / our microbenchmarks, with its date and age |
| `aic` | aiconfigurator's per-operation tables, read from the installed package (harness.predict.kernel_data) | imported kernel data (tables) |
| `none` | the datasheet at the chapter's 50 % | uncalibrated |
| a file path | a calibration file written by `harness calibrate` | our microbenchmarks (or what its provenance says) |
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.model.gpu_step import AllReduceCost, GemmConstants, KernelConstants
from harness.model.kernel_tables import KernelTables

KINDS = ("imported kernel data", "our microbenchmarks", "uncalibrated")


@dataclass(frozen=True)
class StepConstants:
    """The constants a prediction uses and how to say where they came from."""

    kind: str  # one of KINDS
    label: str  # one line: which entry / tables, version, date
    constants: KernelConstants | None = None
    tables: KernelTables | None = None
    age_days: int | None = None

    def describe(self) -> str:
        age = "" if self.age_days is None else f", {self.age_days} day{'s' if self.age_days != 1 else ''} old"
        return f"{self.kind}: {self.label}{age}"


def uncalibrated(gpu: str) -> StepConstants:
    c = KernelConstants(gpu)
    return StepConstants("uncalibrated", f"{gpu} datasheet peaks at the chapter's default 50 % efficiency (Chapter 9, §9.2.3)", c)


def _gpu_db() -> Any | None:
    """harness.calibration.gpu_db when this harness has it (the calibration database), else None."""
    try:
        return importlib.import_module("harness.calibration.gpu_db")
    except ImportError:
        return None


def _from_db_entry(entry: Any, gpu: str) -> StepConstants:
    """A database entry (harness.calibration.gpu_db.DbEntry) as the step model's constants: its compute efficiency
    for the GEMMs (per dtype, read at large token counts), its decode bandwidth efficiency for weights and KV, its
    all-reduce fits by card count."""
    cal = entry.constants
    gemm = {}
    for dtype in ("bf16", "fp8"):
        e = cal.efficiency(gpu, 1, 8192, dtype)
        b = cal.efficiency(gpu, 1, 1, dtype, decode_context_tokens=1.0)
        if e is not None:
            gemm[dtype] = GemmConstants(min(1.0, e.compute), min(1.0, (b or e).bandwidth))
    dec = cal.efficiency(gpu, 64, 1, "bf16", decode_context_tokens=2048.0)
    ar = {}
    rec = getattr(entry, "record", None)
    for n in (2, 4, 8):
        fit = rec.collective("all_reduce", n) if rec is not None and hasattr(rec, "collective") else None
        if fit is not None:
            ar[n] = AllReduceCost(max(0.0, fit.alpha_s.value), fit.bandwidth_bytes_per_s.value, f"database all-reduce {n} GPUs")
    kc = KernelConstants(gpu, gemm=gemm, attention_bandwidth_efficiency=min(1.0, dec.bandwidth) if dec else 0.5,
                         allreduce=ar, source=f"calibration database entry {entry.describe()}", calibrated=True)
    kind = entry.provenance.source_kind if entry.provenance.source_kind in KINDS else "our microbenchmarks"
    return StepConstants(kind, entry.describe(), kc, None, entry.age_days)


def step_constants(choice: str, gpu: str, engine: str, *, kernel_data: str | None = None) -> StepConstants:
    """Resolve `--calibration` (auto, db, aic, none or a file) for `gpu` and `engine`."""
    if choice == "none":
        return uncalibrated(gpu)
    if choice in ("auto", "db"):
        db = _gpu_db()
        entry = None
        if db is not None:
            entry = db.pick(gpu, f"aic-{engine}") if hasattr(db, "pick") else None
        if entry is not None:
            return _from_db_entry(entry, gpu)
        if choice == "db":
            raise HarnessError(f"--calibration db: the calibration database has no entry for {gpu}"
                               + ("" if db is not None else " (this harness has no calibration database)")
                               + "; file one (`harness calibrate RUNS --into-db`) or give --calibration aic / none.")
    if choice in ("auto", "aic"):
        try:
            from harness.predict.kernel_data import load_aic_tables  # noqa: PLC0415 - pandas only when tables are read

            t = load_aic_tables(gpu, engine, None, kernel_data)
        except HarnessError:
            if choice == "aic":
                raise
            return uncalibrated(gpu)
        label = t.source.removeprefix("imported kernel data: ")
        return StepConstants("imported kernel data", label, KernelConstants(gpu, source=t.source, calibrated=True), t)
    p = Path(choice)
    if p.is_file():
        db = _gpu_db()
        if db is None or not hasattr(db, "load_entry"):
            raise HarnessError(f"--calibration {choice}: reading a calibration file needs the calibration database module "
                               "(harness.calibration.gpu_db); give auto, aic or none.")
        return _from_db_entry(db.load_entry(p), gpu)
    raise HarnessError(f"--calibration {choice!r}: give auto, db, aic, none, or the path of a calibration file "
                       "(calibration/gpus/<gpu>/<family>.json).")
