"""Where the step model's constants come from, chosen once per prediction and said in its output.

`--calibration` picks (default `auto`):

| choice | source | label |
|---|---|---|
| `auto` | the GPU's entry in the calibration database (calibration/gpus/, harness.calibration.gpu_db) when it has one, else the installed aiconfigurator's kernel tables for the GPU and engine, else the datasheet | as below |
| `db` | the database entry (refused when the GPU has none): its kernel grids when it carries them (schema 4: the same tables `aic` reads, so the same step model), else its fitted constants | its kind: imported kernel data / our microbenchmarks, with its date and age |
| `aic` | aiconfigurator's per-operation tables, read from the installed package (harness.predict.kernel_data) | imported kernel data (tables) |
| `none` | the datasheet at the chapter's 50 % | uncalibrated |
| a file path | a calibration file written by `harness calibrate` | our microbenchmarks (or what its provenance says) |
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.model.gpu_step import GemmConstants, KernelConstants
from harness.model.kernel_tables import KernelTables, grid_from_points

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


def _from_db_entry(entry: Any, gpu: str, engine: str | None = None) -> StepConstants:
    """A database entry (harness.calibration.gpu_db.DbEntry) as the step model's constants: its measured kernel grids
    when it carries them (schema 4: the same tables `--calibration aic` reads, so the same step model), else (schema 3)
    its fitted constants. An operator family the grids do not hold at all (no GEMM grid, no attention grid: another GPU
    generation's kernels, said in the grids' notes) takes the entry's fitted constants; within a family the grids
    hold, a shape they lack falls back as `aic` does (the datasheet's 50 %)."""
    fitted = _from_fitted_constants(entry, gpu, engine)
    tables = getattr(entry.record, "kernel_tables", None)
    if tables is None:
        return fitted
    plain = KernelConstants(gpu)
    kc = dataclasses.replace(fitted.constants, source=f"calibration database entry {entry.describe()}")
    from_fits = []
    if tables.gemm:
        kc = dataclasses.replace(kc, gemm={})
    else:
        from_fits.append("GEMM")
    if tables.decode_attention or tables.prefill_attention or tables.mla_decode or tables.mla_prefill:
        kc = dataclasses.replace(kc, attention_compute_efficiency=plain.attention_compute_efficiency,
                                 attention_bandwidth_efficiency=plain.attention_bandwidth_efficiency)
    else:
        from_fits.append("attention")
    if not tables.allreduce and fitted.tables is not None:
        tables = dataclasses.replace(tables, allreduce=fitted.tables.allreduce)
        from_fits.append("all-reduce")
    label = (f"database entry {entry.describe()}; kernel grids ({tables.source.removeprefix('imported kernel data: ')})"
             + (f"; its fitted constants for {', '.join(from_fits)} (no grid)" if from_fits else "")
             + "".join(f"; {n}" for n in tables.notes))
    return StepConstants(fitted.kind, label, kc, tables)


def _from_fitted_constants(entry: Any, gpu: str, engine: str | None = None) -> StepConstants:
    """An entry without kernel grids (schema 3 and older) as the step model's constants: the GEMMs' compute efficiency
    per dtype read at 8192 tokens per card, their weight-streaming efficiency as the entry's decode bandwidth efficiency
    at batch 1 (its shortest measured context), the attention's as the decode bandwidth efficiency at batch 64 and
    context 2048, and the all-reduce read off its fitted collectives (the measured sizes, interpolated; the engine's own
    implementation when the entry has it)."""
    cal = entry.constants
    gemm = {}
    for dtype in ("bf16", "fp8"):
        e = cal.efficiency(gpu, 1, 8192, dtype)
        if e is not None:
            gemm[dtype] = GemmConstants(min(1.0, e.compute), min(1.0, e.bandwidth))
    dec = cal.efficiency(gpu, 64, 1, "bf16", decode_context_tokens=2048.0)
    rec = getattr(entry, "record", None)
    ar: dict[int, Any] = {}
    impl = {"vllm": "vllm_graph", "sglang": "sglang_graph", "trtllm": "trtllm"}.get(engine or "")
    for n in (2, 4, 8):
        fit = None
        if rec is not None and hasattr(rec, "collective"):
            fit = rec.collective("all_reduce", n, impl) or rec.collective("all_reduce", n)
        if fit is not None:
            ar[n] = grid_from_points(np.asarray(fit.sizes_bytes, dtype=float)[:, None], np.asarray(fit.median_s, dtype=float),
                                     f"all-reduce {n} GPUs ({fit.implementation})")
    kc = KernelConstants(gpu, gemm=gemm, attention_bandwidth_efficiency=min(1.0, dec.bandwidth) if dec else 0.5,
                         source=f"calibration database entry {entry.describe()}", calibrated=True)
    tables = KernelTables(gpu, kc.source, allreduce=ar) if ar else None
    kind = entry.provenance.source_kind if entry.provenance.source_kind in KINDS else "our microbenchmarks"
    return StepConstants(kind, f"database entry {entry.describe()}; fitted constants", kc, tables)  # describe() says its age


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
            return _from_db_entry(entry, gpu, engine)
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
        label = t.source.removeprefix("imported kernel data: ") + "".join(f"; {n}" for n in t.notes)
        return StepConstants("imported kernel data", label, KernelConstants(gpu, source=t.source, calibrated=True), t)
    p = Path(choice)
    if p.is_file():
        db = _gpu_db()
        if db is None or not hasattr(db, "load_entry"):
            raise HarnessError(f"--calibration {choice}: reading a calibration file needs the calibration database module "
                               "(harness.calibration.gpu_db); give auto, aic or none.")
        return _from_db_entry(db.load_entry(p), gpu, engine)
    raise HarnessError(f"--calibration {choice!r}: give auto, db, aic, none, or the path of a calibration file "
                       "(calibration/gpus/<gpu>/<family>.json).")
