"""The calibration file: versioned, human-readable JSON per machine fingerprint, calibration/<machine>.json.

SCHEMA_VERSION history (one upgrade step per version, applied on load by harness.versioning; newer files
are refused):
  1 — first version: machine, key facts, runs, seed, bootstrap count, curves, links, C_C, B_D,
      storage, stages, proxy, warnings; every estimate {value, low, high, unit, n_samples,
      run_ids, method}. The version was stored as `format_version`.
  2 — the version field is `schema_version`, the name every harness file uses; nothing else changed
      (the upgrade 1 -> 2 reads `format_version` and drops it).
  3 — `collectives` (all-reduce and other collectives: T(S) = α + S/β per GPU count, with the measured sizes) and
      `provenance` (source, device, driver, torch/CUDA, engine and version, dates, run ids, command; required for an
      entry of the GPU calibration database calibration/gpus/). The upgrade 2 -> 3 adds both empty.
  4 — `kernel_tables`: the measured kernel grids the step model interpolates (GEMM, attention, all-reduce, MoE, MLA;
      harness.model.kernel_tables_codec), so a database entry predicts as the kernel data it was filed from. The
      upgrade 3 -> 4 adds it empty (null): such an entry predicts from its fitted constants.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from harness.calibration.record import CalibrationRecord, FieldError, at
from harness.errors import HarnessError
from harness.versioning import load_versioned, stamp_version

FORMAT = "harness-calibration"
SCHEMA_VERSION = 4
FORMAT_VERSION = SCHEMA_VERSION  # the old name of the constant


def _upgrade_2_to_3(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "collectives": d.get("collectives") or [], "provenance": d.get("provenance")}


def _upgrade_3_to_4(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "kernel_tables": d.get("kernel_tables")}


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: lambda d: d,  # 1 -> 2: field renamed only
    2: _upgrade_2_to_3,
    3: _upgrade_3_to_4,
}
DEFAULT_DIR = Path("calibration")

_README = (
    "Constants fitted by `harness calibrate` from the micro runs listed under `runs`. Base units: s, bytes/s, "
    "FLOP/s; efficiencies are fractions of the spec peak named in `peak_source`. Each estimate gives value, a 95% "
    "bootstrap interval [low, high] over the raw samples (seed and resample count below), the run ids and the method. "
    "`proxy` maps a GPU or link the model plans for to the measured device or link standing in for it. "
    "`collectives` fit T(S) = α + S/β per collective and GPU count (β: payload bytes / time, nccl-tests' algbw); "
    "`provenance` says where the runs came from (docs/calibration.md, \"The GPU calibration database\"). "
    "`kernel_tables` holds the measured kernel grids the step model interpolates (its `encoding` says how)."
)


def default_path(machine: str) -> Path:
    return DEFAULT_DIR / f"{machine}.json"


def dumps(rec: CalibrationRecord, *, one_line_points: bool = False) -> str:
    """The file's text: indented JSON, one field per line; with `one_line_points` each curve point on one line (the GPU
    calibration database's entries: a third of the size, and a diff still shows which point changed)."""
    body = {"format": FORMAT, **stamp_version({}, SCHEMA_VERSION), "readme": _README, **rec.to_dict()}
    if not one_line_points:
        return json.dumps(body, indent=2, sort_keys=False, allow_nan=False) + "\n"
    lines: dict[str, str] = {}

    def one_line(x: Any) -> str:
        key = f"@@line-{len(lines)}@@"
        lines[key] = json.dumps(x, sort_keys=False, allow_nan=False, ensure_ascii=False)
        return key

    for c in body["curves"]:
        c["points"] = [one_line(pt) for pt in c["points"]]
    for fit in (*body["links"], *body["collectives"]):  # the measured sizes and times: one line per array
        for k, v in fit.items():
            if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
                fit[k] = one_line(v)
    if body.get("kernel_tables"):  # one line per block of kernel grids
        body["kernel_tables"] = {**body["kernel_tables"],
                                 "blocks": [one_line(b) for b in body["kernel_tables"]["blocks"]]}
    text = json.dumps(body, indent=2, sort_keys=False, allow_nan=False, ensure_ascii=False)
    for key, line in lines.items():
        text = text.replace(json.dumps(key), line, 1)
    return text + "\n"


def save_calibration(rec: CalibrationRecord, path: str | Path, *, one_line_points: bool = False) -> Path:
    """Write the record as JSON (temporary name, then rename)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        tmp.write_text(dumps(rec, one_line_points=one_line_points), encoding="utf-8")
        os.replace(tmp, p)
    except OSError as exc:
        raise HarnessError(f"calibration file {str(path)!r} cannot be written ({exc}); give a writable path (--out).") from None
    return p


def parse_calibration(d: Any, source: str) -> CalibrationRecord:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise HarnessError(f"{source} is not a calibration file (no \"format\": \"{FORMAT}\"); make one with `harness calibrate`.")
    d = load_versioned(d, SCHEMA_VERSION, UPGRADES, source, legacy_fields=("format_version",),
                       fix="regenerate it with `harness calibrate`", what="calibration file")
    try:
        rec = at("", CalibrationRecord.from_dict, d)
    except FieldError as exc:
        where = f"{exc.path}: " if exc.path else ""
        problem = exc.problem.replace("bad value (", "a bad value (")
        if problem.startswith("field ") and problem.endswith("is missing"):
            raise HarnessError(f"{source}: {where}{problem}; the file is damaged, regenerate it with `harness calibrate`.") from None
        raise HarnessError(f"{source}: {where}{problem}; regenerate it with `harness calibrate`.") from None
    problems = physical_problems(rec)
    if problems:
        raise HarnessError("\n".join([f"calibration file {source} holds impossible values:", *(f"  {p}" for p in problems),
                                       "  regenerate it with `harness calibrate` (an efficiency above 1 is a measurement or "
                                       "spec error: check the peak it is a fraction of)."]))
    if not (rec.curves or rec.links or rec.stages or rec.storage or rec.cpu_expert_flops_per_s
            or rec.host_memory_bandwidth_bytes_per_s or rec.collectives or rec.kernel_tables):
        raise HarnessError(f"{source}: the calibration holds no constants (no curves, links, collectives, stages, storage, "
                           "C_C or B_D); "
                           "calibrate from runs that measured something (`harness micro run`, then `harness calibrate`).")
    return rec


def physical_problems(rec: CalibrationRecord) -> list[str]:
    """Values no measurement can give, each naming its field: efficiencies outside (0, 1], rates and bandwidths
    that are not positive, negative latencies. They are refused, never clamped."""
    out: list[str] = []
    for i, c in enumerate(rec.curves):
        for j, pt in enumerate(c.points):
            for name, v in (("measured.value", pt.measured.value), ("fitted", pt.fitted)):
                if not (0.0 < v <= 1.0):
                    out.append(f"curves[{i}] ({c.quantity} on {c.device}).points[{j}].{name} = {v!r} is outside (0, 1]")
            if not (pt.x > 0 and math.isfinite(pt.x)):
                out.append(f"curves[{i}] ({c.quantity} on {c.device}).points[{j}].x = {pt.x!r} must be a positive {c.x_name}")
    for i, lf in enumerate(rec.links):
        if lf.bandwidth_bytes_per_s.value <= 0:
            out.append(f"links[{i}] ({lf.key}).bandwidth_bytes_per_s.value = {lf.bandwidth_bytes_per_s.value!r} must be > 0")
        if lf.alpha_s.value < 0:
            out.append(f"links[{i}] ({lf.key}).alpha_s.value = {lf.alpha_s.value!r} must be >= 0")
    for i, cf in enumerate(rec.collectives):
        if cf.bandwidth_bytes_per_s.value <= 0:
            out.append(f"collectives[{i}] ({cf.key}).bandwidth_bytes_per_s.value = {cf.bandwidth_bytes_per_s.value!r} must be > 0")
        if cf.alpha_s.value < 0:
            out.append(f"collectives[{i}] ({cf.key}).alpha_s.value = {cf.alpha_s.value!r} must be >= 0")
        if any(not (t > 0 and math.isfinite(t)) for t in cf.median_s):
            out.append(f"collectives[{i}] ({cf.key}).median_s holds a time that is not a positive number")
    for i, st in enumerate(rec.stages):
        if st.rate.value <= 0:
            out.append(f"stages[{i}] ({st.phase} on {st.device}).rate.value = {st.rate.value!r} must be > 0")
    for name, e in (("cpu_expert_flops_per_s", rec.cpu_expert_flops_per_s),
                    ("host_memory_bandwidth_bytes_per_s", rec.host_memory_bandwidth_bytes_per_s),
                    *((f"storage.{k}", v) for k, v in rec.storage.items())):
        if e is not None and e.value <= 0:
            out.append(f"{name}.value = {e.value!r} must be > 0")
    return out


def load_calibration(path: str | Path) -> CalibrationRecord:
    p = Path(path)
    if not p.is_file():
        raise HarnessError(
            f"calibration file {str(p)!r} does not exist; make one with `harness calibrate results/<machine>/ --out {p}`."
        )
    try:
        d = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{p} is not UTF-8 text (byte {exc.start}: {exc.reason}); it is not a calibration file: "
                           "regenerate it with `harness calibrate`.") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HarnessError(f"{p} is not valid JSON ({exc}); regenerate it with `harness calibrate`.") from None
    return parse_calibration(d, str(p))


def load_calibration_for_model(path: str | Path):
    """The model's view of a calibration file (`harness model plan --calibration FILE`): a
    harness.model.calibration.Calibration."""
    from harness.calibration.apply import MeasuredConstants

    rec = load_calibration(path)
    if not rec.curves:
        import sys

        print(f"warning: calibration {path} has no efficiency curves; the model uses the scenario's efficiencies for "
              "prefill and decode (only the links, stages and host constants it holds are measured).", file=sys.stderr)
    return MeasuredConstants(rec, str(path))
