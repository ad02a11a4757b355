"""Importers: other tools' JSON (nvbandwidth -j, nccl-tests -J, pytest-benchmark) into the micro_* tables.

Each importer module has `parse(path) -> Imported`; `import_to_run` stores the result as a run of
kind "import" with the same tables a `harness micro run` writes, so reports and calibration read
both alike. Add one line to IMPORTERS per tool.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

_SAFE_MACHINE = re.compile(r"^[A-Za-z0-9._-]+$")

IMPORTERS: dict[str, str] = {
    "nvbandwidth": "harness.importers.nvbandwidth",
    "nccl-tests": "harness.importers.nccl_tests",
    "pytest-benchmark": "harness.importers.pytest_benchmark",
    "perftest": "harness.importers.perftest",
    "nixlbench": "harness.importers.nixlbench",
}


@dataclass
class Imported:
    tool: str
    cases: list = field(default_factory=list)  # microbench.case.CaseResult
    skips: list = field(default_factory=list)  # microbench.case.Skip
    facts: dict[str, Any] = field(default_factory=dict)  # versions, devices, command line of the tool's run


def load_json(path: str | Path, tool: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"{tool} import: file {str(p)!r} does not exist; give the JSON file the tool wrote.")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{tool} import: {p} is not UTF-8 text (byte {exc.start}: {exc.reason}); it is binary or not the "
                           "tool's JSON output; give the file written by the tool's JSON option.") from None
    except OSError as exc:
        raise HarnessError(f"{tool} import: {p} cannot be read ({exc}).") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HarnessError(f"{tool} import: {p} is not valid JSON ({exc}); give the file written by the tool's JSON option.") from None


def require(d: Any, key: str, where: str, tool: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise HarnessError(f"{tool} import: {where} has no field {key!r}; this is not {tool} JSON output (or an unsupported version).")
    return d[key]


# ---- typed fields: a wrong type or an impossible value names the field, the value and what was expected ----


def _bad(tool: str, where: str, key: str, v: Any, want: str) -> HarnessError:
    shown = repr(v) if len(repr(v)) <= 80 else repr(v)[:77] + "..."
    return HarnessError(f"{tool} import: {where}: {key} must be {want}, got {shown}; this is not {tool} JSON output "
                        "(or it was edited).")


def number(v: Any, key: str, where: str, tool: str, *, positive: bool = False, allow_nan: bool = False) -> float:
    """A JSON number (or a numeric string, as nvbandwidth writes; "nan" only with `allow_nan`), finite."""
    want = "a positive finite number" if positive else "a finite number"
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise _bad(tool, where, key, v, want)
    try:
        x = float(v)
    except (ValueError, OverflowError):
        raise _bad(tool, where, key, v, want) from None
    if x != x and allow_nan:
        return x
    if not math.isfinite(x) or (positive and x <= 0):
        raise _bad(tool, where, key, v, want)
    return x


def integer(v: Any, key: str, where: str, tool: str, *, minimum: int = 0) -> int:
    """A JSON integer (a float with no fraction is accepted) >= `minimum`."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _bad(tool, where, key, v, f"an integer >= {minimum}")
    return v


def flag(v: Any, key: str, where: str, tool: str) -> bool:
    """A JSON boolean, or the strings "true" / "false" (nccl-tests writes booleans as strings)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise _bad(tool, where, key, v, 'true or false (or the strings "true" / "false")')


def table(v: Any, key: str, where: str, tool: str) -> dict:
    if not isinstance(v, dict):
        raise _bad(tool, where, key, v, "an object {...}")
    return v


def array(v: Any, key: str, where: str, tool: str) -> list:
    if not isinstance(v, list):
        raise _bad(tool, where, key, v, "a list [...]")
    return v


def parse(fmt: str, path: str | Path, **options: Any) -> Imported:
    if fmt not in IMPORTERS:
        raise HarnessError(f"import format {fmt!r} is unknown; known: {', '.join(IMPORTERS)}.")
    return importlib.import_module(IMPORTERS[fmt]).parse(path, **options)


def check_machine(machine: str) -> str:
    """A results/<machine>/ name: letters, digits, . _ - (no path separators)."""
    if not machine or machine.startswith(".") or not _SAFE_MACHINE.match(machine):
        raise HarnessError(f"--machine {machine!r}: a machine name is one path component of letters, digits, . _ -; "
                           "e.g. h200-node01 (default: the fingerprint of the GPU the tool names and this host's CPU).")
    return machine


def import_to_run(fmt: str, path: str | Path, out: str | Path = "results", command_line: list[str] | None = None,
                  machine: str | None = None, **options: Any) -> dict[str, Any]:
    """Parse `path` and write it as results/<machine>/<run_id>/ (kind "import"); returns a summary with the skips.

    `machine` names the machine the tool measured on (results/<machine>/); by default it is the fingerprint
    of the GPU the tool names and of the importing host's CPU."""
    from harness.records import new_manifest
    from harness.store import RunWriter

    if machine is not None:
        check_machine(machine)
    imp = parse(fmt, path, **options)
    notes = [f"imported from {imp.tool} output {path}; host fields describe the importing machine, tool_facts the measuring one"]
    if machine is not None:
        notes.append(f"machine {machine!r} given with --machine")
    manifest = new_manifest(
        "import", gpu_name=imp.facts.get("gpu_name"), gpu_driver=imp.facts.get("driver"), cuda_version=imp.facts.get("cuda_version"),
        command_line=command_line, extra={"tool": imp.tool, "source_file": str(path), "tool_facts": imp.facts},
        notes=notes, machine=machine,
    )
    with RunWriter(manifest, out) as w:
        if imp.cases:
            w.append("micro_cases", [c.to_row() for c in imp.cases])
            w.append("micro_samples", [r for c in imp.cases for r in c.sample_rows()])
        if imp.skips:
            w.append("micro_skips", [s.to_row() for s in imp.skips])
    return {"path": str(w.path), "run_id": manifest.run_id, "machine": manifest.machine, "tool": imp.tool,
            "cases": len(imp.cases), "skips": len(imp.skips),
            "skipped": [{"suite": s.suite, "case": s.case, "reason": s.reason} for s in imp.skips]}


def external_measurement(tool: str, median_s: float, *, samples: list[float] | None = None, n: int = 1,
                         mean_s: float | None = None, min_s: float | None = None, max_s: float | None = None,
                         stddev_s: float | None = None, inner_reps: int = 1, p10_s: float | None = None, p90_s: float | None = None):
    """A Measurement for numbers another tool timed: its raw samples when it kept them, else its summary."""
    from microbench.timing import FULL, Measurement, SampleStats, measurement_from_samples

    if samples:
        return measurement_from_samples(list(samples), inner_reps, f"external:{tool}", FULL)
    nan = float("nan")
    mean = mean_s if mean_s is not None else median_s
    cv = (stddev_s / mean) if (stddev_s is not None and mean) else nan
    stats = SampleStats(n, median_s, nan if p10_s is None else p10_s, nan if p90_s is None else p90_s, mean,
                        min_s if min_s is not None else nan, max_s if max_s is not None else nan, cv)
    unstable = cv == cv and cv > FULL.cv_threshold
    remedy = f"{tool} reported a standard deviation of {cv:.0%} of the mean; rerun the tool with more iterations" if unstable else None
    return Measurement((), inner_reps, f"external:{tool}", stats, unstable, remedy, (f"summary statistics from {tool}; no raw samples kept",))
