"""The runs one calibration is fitted from: one machine's micro runs, their cases and raw samples.

Runs are mixed only when their key facts agree (machine, CPU model, GPU model, GPU driver, the
harness schema they were written with); otherwise the differing fact is named. Cases marked
invalid by the microbenchmark (above the spec peak) are left out, with a warning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.calibration.record import RunRef
from harness.errors import HarnessError

# stored table names: the microbenchmarks write micro_*; "cases"/"samples" are accepted too
CASE_TABLES = ("micro_cases", "cases")
SAMPLE_TABLES = ("micro_samples", "samples")


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


def device_key(device: str, gpu_name: str | None) -> str:
    """"cpu" for CPU cases; the GPU spec catalog name for CUDA cases (e.g. "h200-sxm") when known."""
    if not device or device == "cpu":
        return "cpu"
    if gpu_name:
        from microbench.backends import gpu_spec_for

        spec = gpu_spec_for(gpu_name)
        if spec is not None:
            return spec.name
        from harness.records import slug

        return slug(gpu_name)
    return device


def _key_facts(run: Any) -> dict[str, Any]:
    facts = run.manifest.key_facts()
    try:  # the schema the run was written with, not the one it was upgraded to on load
        facts["schema_version"] = json.loads((run.path / "manifest.json").read_text()).get("schema_version")
    except (OSError, json.JSONDecodeError):
        pass
    return facts


def check_key_facts(runs: list[Any]) -> dict[str, Any]:
    """The shared key facts of `runs`; raise naming the first fact that differs and the two runs."""
    first = runs[0]
    ref = _key_facts(first)
    for r in runs[1:]:
        facts = _key_facts(r)
        for k in ref:
            if facts.get(k) != ref[k]:
                raise HarnessError(
                    f"runs differ in key fact {k!r}: {first.manifest.run_id} has {ref[k]!r}, {r.manifest.run_id} has "
                    f"{facts.get(k)!r}; a calibration mixes runs of one machine configuration only. Calibrate them "
                    "separately (move the other runs to their own directory)."
                )
    return ref


def _table(run: Any, names: tuple[str, ...]):
    have = run.tables()
    for n in names:
        if n in have:
            return run.table(n)
    return None


def load_machine_runs(path: str | Path, kind: str = "micro") -> MachineRuns:
    """Every `kind` run below `path` (results/<machine>/, one run, or results/ holding one machine)."""
    import pandas as pd

    from harness.store import iter_runs

    p = Path(path)
    if not p.exists():
        raise HarnessError(f"{p} does not exist; give results/<machine>/ (run `harness micro run --out results/` first).")
    runs = list(iter_runs(p, kind=kind))
    if not runs:
        raise HarnessError(
            f"no {kind!r} runs below {p}; measure some with `harness micro run --suite all --out results/` and give "
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
    gpu_name = usable[0].manifest.gpu_name
    frames, sframes, refs = [], [], []
    for r in usable:
        cases = _table(r, CASE_TABLES)
        suites = tuple(r.manifest.extra.get("suites", ())) if isinstance(r.manifest.extra, dict) else ()
        refs.append(RunRef(r.manifest.run_id, r.manifest.kind, r.manifest.status, float(r.manifest.created_unix_s), suites))
        if cases is None or cases.empty:
            warnings.append(f"run {r.manifest.run_id} has no case table; nothing used from it")
            continue
        cases = cases.copy()
        cases["run_id"] = r.manifest.run_id
        frames.append(cases)
        samples = _table(r, SAMPLE_TABLES)
        if samples is not None and not samples.empty:
            samples = samples[["case_id", "time_s"]].copy()
            samples["run_id"] = r.manifest.run_id
            sframes.append(samples)
    if not frames:
        raise HarnessError(f"the runs below {p} hold no measured cases; rerun `harness micro run`.")
    cases = pd.concat(frames, ignore_index=True)
    cases["params"] = [json.loads(x) if isinstance(x, str) and x else {} for x in cases["params_json"]]
    cases["device_key"] = [device_key(d, gpu_name) for d in cases["device"]]
    if "valid" in cases.columns:
        bad = cases[~cases["valid"].astype(bool)]
        if len(bad):
            warnings.append(
                f"{len(bad)} case(s) marked invalid (above the spec peak) left out: "
                + ", ".join(sorted(set(bad["case_id"]))[:5]) + (" …" if bad["case_id"].nunique() > 5 else "")
            )
            cases = cases[cases["valid"].astype(bool)].reset_index(drop=True)
    if "unstable" in cases.columns and cases["unstable"].astype(bool).any():
        n = int(cases["unstable"].astype(bool).sum())
        warnings.append(f"{n} case(s) were unstable (CV above threshold); their intervals are wide — rerun them on an idle machine")
    samples = pd.concat(sframes, ignore_index=True) if sframes else pd.DataFrame(columns=["case_id", "time_s", "run_id"])
    return MachineRuns(machines[0], facts, tuple(refs), gpu_name, cases, samples, tuple(warnings))
