"""The calibration pipeline: one machine's runs -> fitted constants -> calibration/<machine>.json, or an entry of
the GPU calibration database (calibration/gpus/<gpu>/<family>.json) with the runs' provenance."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.calibration.file import default_path, save_calibration
from harness.calibration.fit import DEFAULT_BOOTSTRAP, fit_calibration
from harness.calibration.record import CalibrationRecord, Provenance
from harness.calibration.runs import MachineRuns, load_machine_runs
from harness.errors import HarnessError


def parse_proxy(items: list[str] | None) -> dict[str, str]:
    """["a100-80gb-sxm=cpu", "nic-200g=memcpy:h2h"] -> {target: measured}; targets must be catalog names."""
    from harness.specs.gpus import GPUS
    from harness.specs.links import LINKS

    out: dict[str, str] = {}
    for item in items or []:
        target, sep, measured = item.partition("=")
        target, measured = target.strip(), measured.strip()
        if not sep or not target or not measured:
            raise HarnessError(f"--proxy: got {item!r}; write TARGET=MEASURED, e.g. a100-80gb-sxm=cpu or nic-200g=pcie:h2d.")
        if target not in GPUS and target not in LINKS:
            raise HarnessError(
                f"--proxy: {target!r} is neither a GPU nor a link of the spec catalog; known GPUs: {', '.join(GPUS)}; "
                f"links: {', '.join(LINKS)}."
            )
        out[target] = measured
    return out


def check_proxy(rec: CalibrationRecord) -> None:
    from harness.specs.gpus import GPUS

    links = {k for lf in rec.links for k in (lf.key, lf.link, f"{lf.link}:{lf.direction}")}
    for target, measured in rec.proxy.items():
        have = rec.devices if target in GPUS else sorted(links)
        if measured not in have:
            raise HarnessError(
                f"--proxy {target}={measured}: nothing named {measured!r} was measured in these runs; measured: "
                f"{', '.join(have) or 'none'}."
            )


def _iso_date(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, tz=timezone.utc).date().isoformat()


def entry_gpu(mr: MachineRuns) -> str:
    """The GPU spec name of the device the runs measured (a database entry is one GPU's)."""
    from harness.specs.device_names import spec_name_for_device

    if not mr.gpu_name:
        raise HarnessError(f"the runs of {mr.machine} measured no GPU (no GPU name in their manifests); the GPU calibration "
                           "database holds GPU calibrations only — write a calibration file with --out instead.")
    spec = spec_name_for_device(mr.gpu_name)
    if spec is None:
        raise HarnessError(f"the runs of {mr.machine} measured {mr.gpu_name!r}, which has no GPU spec; add it to "
                           "harness/specs/gpus.py and its exact name to harness/specs/device_names.py, then file again.")
    return spec


def _family_group(family: str) -> str:
    """The database family of a curve's kernel family: cuda-bf16 and cuda-fp8 are both "cuda" (torch/cuBLAS)."""
    return family.split("-")[0] if family.startswith(("cuda-", "torch-")) else family


def entry_family(mr: MachineRuns, rec: CalibrationRecord) -> str:
    """The kernel family an entry is filed under: the one the runs declare (an imported engine's), else the curves'."""
    declared = {str((m.extra or {}).get("kernel_family")) for m in mr.manifests if (m.extra or {}).get("kernel_family")}
    if len(declared) == 1:
        return declared.pop()
    if len(declared) > 1:
        raise HarnessError(f"the runs of {mr.machine} declare several kernel families ({', '.join(sorted(declared))}); "
                           "file each family's runs on their own (move them to separate directories).")
    groups = sorted({_family_group(c.kernel_family) for c in rec.curves})
    return "+".join(groups) if groups else "cuda"


def _tool_facts(mr: MachineRuns) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for m in mr.manifests:
        tf = (m.extra or {}).get("tool_facts")
        if isinstance(tf, dict):
            facts.update(tf)
    return facts


def runs_provenance(mr: MachineRuns, rec: CalibrationRecord, command: str, family: str | None = None) -> Provenance:
    """Where the runs of `mr` came from, for a database entry: device, driver, torch/CUDA, engine, dates, runs, command."""
    gpu = entry_gpu(mr)
    fam = family or entry_family(mr, rec)
    ms = [m for m in mr.manifests if m.gpu_name] or list(mr.manifests)
    first = ms[0] if ms else None
    facts = _tool_facts(mr)
    imported = bool(facts.get("kernel_database"))
    engine = facts.get("engine") or (first.engine.get("name") if first and first.engine else None)
    engine_version = facts.get("engine_version") or (first.engine.get("version") if first and first.engine else None)
    commands = list(dict.fromkeys(" ".join(m.command_line) for m in mr.manifests if m.command_line))
    notes = [str(n) for n in facts.get("provenance_notes", ())]
    synthetic = any((m.extra or {}).get("synthetic") for m in mr.manifests)
    if imported:
        source = str(facts["kernel_database"])
        measured = None
    elif synthetic:
        source = "harness.calibration.synthetic: generated from known constants, not a measurement"
        measured = _iso_date(max(m.created_unix_s for m in mr.manifests))
    else:
        torch = first.torch_version if first else None
        source = "harness micro run" + (f", torch {torch}" if torch else "")
        measured = _iso_date(max(m.created_unix_s for m in mr.manifests)) if mr.manifests else None
    return Provenance(
        source_kind="imported kernel data" if imported else ("synthetic" if synthetic else "our microbenchmarks"),
        source=source, gpu=gpu, family=fam,
        filed_date=datetime.now(timezone.utc).date().isoformat(),
        command=" ; ".join([*commands, command]) if command else " ; ".join(commands),
        device_name=mr.gpu_name, driver=(first.gpu_driver if first else None) or facts.get("driver"),
        torch_version=(first.torch_version if first else None) or facts.get("torch_version"),
        cuda_version=(first.cuda_version if first else None) or facts.get("cuda_version"),
        engine=str(engine) if engine else None, engine_version=str(engine_version) if engine_version else None,
        measured_date=measured, run_ids=tuple(r.run_id for r in mr.runs),
        reference_model=rec.reference_model or None, notes=tuple(notes),
    )


def run_kernel_tables(mr: MachineRuns):
    """The runs' measured kernel grids (harness.model.kernel_tables.KernelTables), or None when no run holds them."""
    from harness.calibration.runs import KERNEL_TABLES_FILE
    from harness.model.kernel_tables_codec import tables_from_dict

    if mr.kernel_tables is None:
        return None
    try:
        return tables_from_dict(mr.kernel_tables)
    except ValueError as exc:
        raise HarnessError(f"the runs of {mr.machine}: {KERNEL_TABLES_FILE} cannot be read ({exc}); the run is damaged — "
                           "import it again (`harness micro import-aic ...`).") from None


def calibrate(results: str | Path, out: str | Path | None = None, seed: int = 0, n_bootstrap: int = DEFAULT_BOOTSTRAP,
              proxy: dict[str, str] | None = None, *, into_db: bool = False, db_dir: str | Path | None = None,
              replace_newer: bool = False, command: str = "", model: str | None = None) -> tuple[CalibrationRecord, Path]:
    """Fit the constants of the runs below `results` (one machine) and write the calibration file, or, with `into_db`,
    file them into the GPU calibration database (calibration/gpus/<gpu>/<family>.json) with their provenance.

    `model` names the model whose shapes a kernel grid (imported kernel data) is read at (default qwen3-8b)."""
    mr = load_machine_runs(results)
    rec = fit_calibration(mr, seed=seed, n_bootstrap=n_bootstrap, model=model)
    rec = replace(rec, proxy=dict(proxy or {}), kernel_tables=run_kernel_tables(mr))
    check_proxy(rec)
    if into_db:
        from harness.calibration.gpu_db import file_entry

        if out is not None:
            raise HarnessError("--into-db files the calibration into the GPU database; leave out --out (or give --out "
                               "without --into-db for a file of your own).")
        if rec.proxy:
            raise HarnessError("--proxy does not go into the GPU database (an entry holds what was measured on its GPU); "
                               "apply proxies with `harness calibrate --out FILE --proxy ...` instead.")
        if not command:
            command = " ".join(["harness", *sys.argv[1:]])
        rec = replace(rec, provenance=runs_provenance(mr, rec, command))
        entry = file_entry(rec, db_dir=db_dir, replace_newer=replace_newer)
        return entry.record, entry.path
    if out is None:
        target = default_path(rec.machine)
    elif str(out).endswith(("/", "\\")) or Path(out).is_dir():  # a directory: <dir>/<machine>.json
        target = Path(out) / f"{rec.machine}.json"
    else:
        target = Path(out)
    path = save_calibration(rec, target)
    return rec, path
