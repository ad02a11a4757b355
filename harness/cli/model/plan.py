"""Capacity plan of a scenario: stage rates, KV hand-off, colocated vs PD vs chunked, drain, cost."""

from __future__ import annotations

import argparse
import sys

from harness.calibration.file import load_calibration_for_model
from harness.calibration.gpu_db import for_gpus, uncalibrated_label
from harness.cli._output import print_json
from harness.model.plan import plan
from harness.model.record import as_json
from harness.report.plans.plan import render_text
from harness.specs.scenario import load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (see workloads/scenarios/)")
    parser.add_argument("--json", action="store_true", help="print every field as JSON (documented in docs/model.md)")
    parser.add_argument("--no-grid", action="store_true", help="leave the full PD allocation grid out of --json")
    parser.add_argument("--calibration", metavar="FILE|db[:FAMILY]|none",
                        help="calibration JSON whose measured constants replace the defaults; 'db': the GPU calibration "
                             "database's entry for each scenario GPU (the default for GPUs whose efficiency the scenario "
                             "does not state), 'db:FAMILY' preferring a kernel family (db:aic-vllm); 'none': datasheet "
                             "peaks at the scenario's efficiency")


def database_gpus(s) -> list[str]:
    """The scenario GPUs the database applies to by default: those whose efficiency the scenario does not state."""
    gpus = list(dict.fromkeys(p.gpu for p in s.pools))
    if "efficiency" not in s.model_fields_set:
        return gpus
    stated = s.efficiency.model_fields_set
    if stated & {"compute", "bandwidth"}:
        return []
    return [g for g in gpus if g not in s.efficiency.per_gpu]


def load_calibration(path: str | None, s=None):
    """The calibration a plan uses: a file, the database's entries ('db', and by default for the GPUs the scenario
    states no efficiency for), or none; says on stderr which entry each database GPU uses and how old it is, or that
    it has none (uncalibrated)."""
    if path == "none" or (not path and s is None):
        return None
    explicit = bool(path) and (path == "db" or path.startswith("db:"))
    if path and not explicit:
        return load_calibration_for_model(path)

    family = path.partition(":")[2] or None if path else None
    all_gpus = list(dict.fromkeys(p.gpu for p in s.pools))
    gpus = all_gpus if explicit else database_gpus(s)
    if not gpus:  # the scenario states every GPU's efficiency: it is kept, and said nothing about (--calibration db)
        return None
    cal = for_gpus(gpus, family)
    if cal is None:
        print(f"calibration: {'; '.join(f'{g}: ' + lbl for g, lbl in _labels(gpus).items())}", file=sys.stderr)
        return None
    for g, e in cal.picked.items():
        print(f"calibration: {g}: {e.describe()}", file=sys.stderr)
    for g, label in cal.uncalibrated.items():
        print(f"calibration: {g}: {label}", file=sys.stderr)
    return cal


def _labels(gpus: list[str]) -> dict[str, str]:
    return {g: uncalibrated_label(g) for g in gpus}


def main(args: argparse.Namespace) -> int:
    s = load_scenario(args.scenario)
    calibration = load_calibration(args.calibration, s)
    result = plan(s, calibration=calibration, include_grid=args.json and not args.no_grid)
    if args.json:
        if result.pd is not None and result.pd.grid_omitted:
            print(f"warning: pd.grid left out of the JSON ({result.pd.grid_omitted}); pass --no-grid to silence this.",
                  file=sys.stderr)
        print_json(as_json(result))
    else:
        print(render_text(result))
    return 0
