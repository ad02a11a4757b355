"""Fit the model's constants from one machine's micro runs into calibration/<machine>.json."""

from __future__ import annotations

import argparse

from harness.cli._output import print_json
from harness.report.calibration_summary import render_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="results/<machine>/, one run directory, or results/ when it holds one machine's micro runs")
    parser.add_argument("--out", metavar="FILE", help="calibration file to write, or a directory for <dir>/<machine>.json (default calibration/<machine>.json)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap resamples per constant (default 200)")
    parser.add_argument("--proxy", action="append", metavar="TARGET=MEASURED",
                        help="let a measured device or link stand for a catalog GPU or link the model plans for "
                             "(e.g. a100-80gb-sxm=cpu, nic-200g=pcie:h2d); repeatable")
    parser.add_argument("--json", action="store_true", help="print the whole calibration record as JSON")


def main(args: argparse.Namespace) -> int:
    from harness.calibration.calibrate import calibrate, parse_proxy

    rec, path = calibrate(args.results, args.out, args.seed, args.bootstrap, parse_proxy(args.proxy))
    if args.json:
        print_json(rec.to_dict())
    else:
        print(render_summary(rec, str(path)))
    return 0
