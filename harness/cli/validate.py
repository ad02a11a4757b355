"""Validate the harness's predictions against real GPU serving measurements.

  harness validate silicon --system h200_sxm                    our twin and aiconfigurator, every h200_sxm row
  harness validate silicon --system h200_sxm --no-aic --json    ours only, per-row JSON
  harness validate silicon --system h200_sxm --plot docs/gpu-validation.png

The rows are aiconfigurator's silicon_sample.csv (installed with `pip install 'aiconfigurator==0.12.0'`, or --csv).
Only the asked system's rows are read. Method, profiles and the latest table: docs/gpu-validation.md.
"""

from __future__ import annotations

import argparse

from harness.cli._output import print_json
from harness.predict.plot import plot_validation
from harness.predict.render import render_markdown, render_validation
from harness.predict.silicon import validate_silicon


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    s = sub.add_parser("silicon", help="predict aiconfigurator's measured serving rows of one system, beside aiconfigurator")
    s.add_argument("--system", required=True, help="the rows' system, e.g. h200_sxm (only its rows are read)")
    s.add_argument("--csv", default=None, help="rows file (default: the installed aiconfigurator's silicon_sample.csv)")
    s.add_argument("--calibration", default="auto", help="our constants: auto (the GPU's database entry and its kernel "
                   "grids, as harness predict; default), db, aic (the installed aiconfigurator's kernel tables), none, or a "
                   "calibration file")
    s.add_argument("--kernel-data", default=None, metavar="DIR", help="aiconfigurator_core/systems/data (default: installed)")
    s.add_argument("--no-aic", action="store_true", help="skip aiconfigurator's own predictions")
    s.add_argument("--limit", type=int, default=None, help="only the first N rows (a quick look)")
    s.add_argument("--plot", default=None, metavar="PNG", help="write predicted-against-measured scatter plots here")
    s.add_argument("--json", action="store_true", help="per-row and per-group JSON")
    s.add_argument("--markdown", action="store_true", help="the per-group table as Markdown (as docs/gpu-validation.md shows it)")


def main(args: argparse.Namespace) -> int:
    v = validate_silicon(args.system, csv=args.csv, calibration=args.calibration, with_aic=not args.no_aic,
                         kernel_data=args.kernel_data, limit=args.limit)
    if args.plot:
        plot_validation(v, args.plot)
    if args.json:
        print_json(v.to_dict())
    elif args.markdown:
        print(render_markdown(v))
    else:
        print(render_validation(v))
    return 0
