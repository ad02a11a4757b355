"""Render a report from stored results (never measures): one self-contained HTML file plus a Markdown summary."""

from __future__ import annotations

import argparse

from harness.report.registry import report
from harness.report.renderer import ReportOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="RUN_OR_DIR", help="a run directory, results/<machine>/, or results/")
    parser.add_argument("--to", metavar="DIR", help="output directory (default reports/<name of RUN_OR_DIR>/)")
    parser.add_argument("--renderer", help="renderer to use (default: picked by the kind of the runs found)")
    parser.add_argument("--scenario", metavar="FILE", help="scenario the calibration and ch19 reports re-plan (default ch9-hetero-pd)")
    parser.add_argument("--calibration", metavar="FILE", help="use this calibration file instead of fitting the runs")
    parser.add_argument("--proxy", default="auto", metavar="auto|none|GPU=DEVICE,...",
                        help="which measured device stands for scenario GPUs not measured themselves (default auto)")
    parser.add_argument("--load", metavar="DIR", help="directory with end-to-end load runs to compare with the model")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap resamples (default 200)")


def main(args: argparse.Namespace) -> int:
    options = ReportOptions(scenario=args.scenario, calibration=args.calibration, proxy=args.proxy, load=args.load,
                            seed=args.seed, n_bootstrap=args.bootstrap)
    written = report(args.path, args.to, args.renderer, options)
    for p in written:
        print(p)
    return 0
