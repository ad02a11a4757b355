"""Capacity plan of a scenario: stage rates, KV hand-off, colocated vs PD vs chunked, drain, cost."""

from __future__ import annotations

import argparse
import sys

from harness.cli._output import print_json
from harness.model.plan import plan
from harness.model.record import as_json
from harness.report.plans.plan import render_text
from harness.specs.scenario import load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (see workloads/scenarios/)")
    parser.add_argument("--json", action="store_true", help="print every field as JSON (documented in docs/model.md)")
    parser.add_argument("--no-grid", action="store_true", help="leave the full PD allocation grid out of --json")
    parser.add_argument("--calibration", metavar="FILE", help="calibration JSON whose measured constants replace the defaults")


def load_calibration(path: str | None):
    if not path:
        return None
    from harness.calibration.file import load_calibration_for_model  # imported only when a calibration is given

    return load_calibration_for_model(path)


def main(args: argparse.Namespace) -> int:
    s = load_scenario(args.scenario)
    result = plan(s, calibration=load_calibration(args.calibration), include_grid=args.json and not args.no_grid)
    if args.json:
        if result.pd is not None and result.pd.grid_omitted:
            print(f"warning: pd.grid left out of the JSON ({result.pd.grid_omitted}); pass --no-grid to silence this.",
                  file=sys.stderr)
        print_json(as_json(result))
    else:
        print(render_text(result))
    return 0
