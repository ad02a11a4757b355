"""The runs one calibration is fitted from: one machine's micro runs, their cases and raw samples.

Runs are read through harness.store only, and mixed only when their key facts agree (machine, CPU
model, GPU model, GPU driver, the harness schema they were written with); otherwise the differing
fact is named. Each case's params are parsed into their typed record (microbench/params.py,
column `record`). Cases marked invalid by the microbenchmark (above the spec peak) are left out,
with a warning. A GPU device is named by its spec (harness/specs/device_names.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.calibration.record import RunRef
from harness.errors import HarnessError
from microbench.params import parse_params

# stored table names, as the microbenchmarks and the importers write them (harness.store)
CASE_TABLE = "micro_cases"
SAMPLE_TABLE = "micro_samples"
# the run's measured kernel grids for the step model (harness.model.kernel_tables_codec), filed into database entries
KERNEL_TABLES_FILE = "kernel_tables.json"
# suites whose cases calibration reads, through the typed params records of microbench/params.py
CALIBRATION_SUITES = ("decode", "gemm", "transfer", "moe", "storage", "stage")
# imported kernel grids (harness/importers/aic.py): hundreds of thousands of cases; harness.calibration.kernel_grid reads
# the shapes it needs and parses only those into their typed records
KERNEL_GRID_SUITES = ("kernel",)


@dataclass(frozen=True)
class MachineRuns:
    """Cases (one row per case per run, with `device_key` and parsed `params`) and raw samples."""

    machine: str
    key_facts: dict[str, Any]
    runs: tuple[RunRef, ...]
    gpu_name: str | None
    cases: Any  # pandas DataFrame
    samples: Any  # pandas DataFrame: run_id, case_id, time_s
    warnings: tuple[str, ...]
    manifests: tuple[Any, ...] = ()  # harness.records.RunManifest of each usable run (provenance of a database entry)
    kernel_tables: dict[str, Any] | None = None  # the newest run's kernel grids (KERNEL_TABLES_FILE), as stored


def device_key(device: str, gpu_name: str | None) -> str:
    """"cpu" for CPU cases; the GPU spec catalog name for CUDA cases (e.g. "h200-sxm") when known."""
    if not device or device == "cpu":
        return "cpu"
    if not device.startswith("cuda"):  # an imported tool's device (mlx5_0, nixl-ucx, ...) keeps its own name
        return device
    if gpu_name:
        from harness.specs.device_names import spec_name_for_device

        spec = spec_name_for_device(gpu_name)
        if spec is not None:
            return spec
        from harness.records import slug

        return slug(gpu_name)
    return device


def _key_facts(run: Any) -> dict[str, Any]:
    if run.manifest.kind == "import":  # another tool measured another device: only the machine must agree
        return {"machine": run.manifest.machine}
    facts = run.manifest.key_facts()
    facts["schema_version"] = run.stored_schema_version  # the schema the run was written with, not the upgraded one
    return facts


def check_key_facts(runs: list[Any]) -> dict[str, Any]:
    """The shared key facts of `runs`; raise naming the first fact that differs and the two runs."""
    first = next((r for r in runs if r.manifest.kind != "import"), runs[0])
    ref = _key_facts(first)
    for r in runs:
        facts = _key_facts(r)
        for k in ref if r.manifest.kind != "import" else facts:
            if facts.get(k) != ref[k]:
                raise HarnessError(
                    f"runs differ in key fact {k!r}: {first.manifest.run_id} has {ref[k]!r}, {r.manifest.run_id} has "
                    f"{facts.get(k)!r}; a calibration mixes runs of one machine configuration only. Calibrate them "
                    "separately (move the other runs to their own directory)."
                )
    return ref


def _table(run: Any, name: str):
    return run.table(name) if name in run.tables() else None


def load_machine_runs(path: str | Path, kind: str | tuple[str, ...] = ("micro", "import")) -> MachineRuns:
    """Every run of `kind` below `path` (results/<machine>/, one run, or results/ holding one machine): micro runs
    and imported tools' runs (perftest, nixlbench, nvbandwidth ...), which share the micro_* tables."""
    import pandas as pd

    from harness.store import iter_runs

    p = Path(path)
    if not p.exists():
        raise HarnessError(f"{p} does not exist; give results/<machine>/ (run `harness micro run --out results/` first).")
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    runs = [r for r in iter_runs(p) if r.manifest.kind in kinds]
    kind = " or ".join(repr(k) for k in kinds)
    if not runs:
        raise HarnessError(
            f"no {kind} runs below {p}; measure some with `harness micro run --suite all --out results/` and give "
            "results/<machine>/."
        )
    machines = sorted({r.manifest.machine for r in runs})
    if len(machines) > 1:
        raise HarnessError(
            f"{p} holds runs of {len(machines)} machines ({', '.join(machines)}); give one of them, e.g. "
            f"{p / machines[0]}/ (make calibrate MACHINE={machines[0]})."
        )
    warnings: list[str] = []
    usable = []
    for r in runs:
        if r.manifest.status == "running":
            warnings.append(f"run {r.manifest.run_id} is still marked running (or was killed); left out")
            continue
        if r.manifest.status == "failed":
            warnings.append(f"run {r.manifest.run_id} failed midway; its completed cases are used")
        usable.append(r)
    if not usable:
        raise HarnessError(f"every {kind} run below {p} is incomplete; rerun the microbenchmarks.")
    facts = check_key_facts(usable)
    gpu_name = next((r.manifest.gpu_name for r in usable if r.manifest.kind != "import"), usable[0].manifest.gpu_name)
    frames, sframes, refs = [], [], []
    for r in usable:
        cases = _table(r, CASE_TABLE)
        suites = tuple(r.manifest.extra.get("suites", ())) if isinstance(r.manifest.extra, dict) else ()
        refs.append(RunRef(r.manifest.run_id, r.manifest.kind, r.manifest.status, float(r.manifest.created_unix_s), suites))
        if cases is None or cases.empty:
            warnings.append(f"run {r.manifest.run_id} has no case table; nothing used from it")
            continue
        cases = cases.copy()
        cases["run_id"] = r.manifest.run_id
        frames.append(cases)
        samples = _table(r, SAMPLE_TABLE)
        if samples is not None and not samples.empty:
            samples = samples[["case_id", "time_s"]].copy()
            samples["run_id"] = r.manifest.run_id
            sframes.append(samples)
    if not frames:
        raise HarnessError(f"the runs below {p} hold no measured cases; rerun `harness micro run`.")
    cases = pd.concat(frames, ignore_index=True)
    cases["params"] = [json.loads(x) if isinstance(x, str) and x else {} for x in cases["params_json"]]
    cases["device_key"] = [device_key(d, gpu_name) for d in cases["device"]]
    grid = cases["suite"].isin(KERNEL_GRID_SUITES).to_numpy()
    cases["record"] = [None if g else parse_params(p, str(cid)) for p, cid, g in zip(cases["params"], cases["case_id"], grid)]
    for suite in CALIBRATION_SUITES:
        mine = cases[cases["suite"] == suite]
        if len(mine) and all(r is None for r in mine["record"]):
            warnings.append(
                f"suite {suite}: {len(mine)} case(s) carry no typed params record (written before microbench/params.py, "
                f"or not a calibration input); none is used — rerun `harness micro run --suite {suite}`")
    if "valid" in cases.columns:
        bad = cases[~cases["valid"].astype(bool)]
        if len(bad):
            warnings.append(
                f"{len(bad)} case(s) marked invalid (above the spec peak) left out: "
                + ", ".join(sorted(set(bad["case_id"]))[:5]) + (" …" if bad["case_id"].nunique() > 5 else "")
            )
            # a kernel grid keeps its invalid cases: harness.calibration.kernel_grid leaves out what they would compose
            # into, and judges a table by its share of them
            keep = cases["valid"].astype(bool) | cases["suite"].isin(KERNEL_GRID_SUITES)
            cases = cases[keep].reset_index(drop=True)
    if "unstable" in cases.columns and cases["unstable"].astype(bool).any():
        n = int(cases["unstable"].astype(bool).sum())
        warnings.append(f"{n} case(s) were unstable (CV above threshold); their intervals are wide — rerun them on an idle machine")
    samples = pd.concat(sframes, ignore_index=True) if sframes else pd.DataFrame(columns=["case_id", "time_s", "run_id"])
    return MachineRuns(machines[0], facts, tuple(refs), gpu_name, cases, samples, tuple(warnings),
                       tuple(r.manifest for r in usable), _kernel_tables(usable))


def _kernel_tables(runs: list[Any]) -> dict[str, Any] | None:
    """The kernel grids of the newest run that holds them (an import of kernel data writes them), or None."""
    for r in sorted(runs, key=lambda r: float(r.manifest.created_unix_s), reverse=True):
        try:
            return r.json(KERNEL_TABLES_FILE)
        except FileNotFoundError:
            continue
    return None
