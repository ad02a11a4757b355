"""The nightly hardware run: micro suites, calibration, report, history; exit 3 when a constant drifted.

  harness nightly --quick --results results/ --history results/history/ --report-dir reports/nightly/

Prints one line per constant (OK / DRIFT / NEW) and the report path, for cron or a CI job. The
history is a parquet dataset partitioned by machine and date (pandas.read_parquet reads it).
"""

from __future__ import annotations

import argparse
import sys

from harness.cli._output import print_json
from harness.errors import RegressionError
from harness.nightly.drift import DriftOptions
from harness.nightly.pipeline import NightlyOptions, run_nightly
from harness.nightly.report import summary_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    a = parser.add_argument
    a("--quick", action="store_true", help="quick suites (small sizes, short budget): the CI form")
    a("--results", default="results", help="results directory (default results/)")
    a("--history", default="results/history", help="history dataset directory (default results/history/)")
    a("--report-dir", default="reports/nightly", help="where the nightly reports go (default reports/nightly/)")
    a("--suite", default="all", help="micro suites to run, comma-separated, or 'all' (default)")
    a("--device", choices=["auto", "cpu", "cuda"], default="auto", help="devices to measure (default: all present)")
    a("--seed", type=int, default=0, help="seed for random inputs")
    a("--from-run", action="append", default=[], metavar="RUN",
      help="append this stored micro run instead of measuring (repeatable; e.g. to backfill the history)")
    a("--no-calibrate", action="store_true", help="skip the calibration and its report")
    a("--baseline-runs", type=int, default=10, metavar="N", help="rolling baseline: the last N runs (default 10)")
    a("--min-history", type=int, default=5, metavar="N", help="judge a constant only with N baseline runs (default 5)")
    a("--drift-z", type=float, default=5.0, help="robust z-score beyond which a constant drifted (default 5)")
    a("--drift-min-change", type=float, default=0.10, help="... and a relative change above this (default 0.10 = 10%%)")
    a("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    drift = DriftOptions(baseline_runs=args.baseline_runs, min_history=args.min_history, z_threshold=args.drift_z,
                         min_change=args.drift_min_change)
    o = NightlyOptions(results_dir=args.results, history_dir=args.history, report_dir=args.report_dir, quick=args.quick,
                       suites=args.suite, device=args.device, seed=args.seed, from_runs=tuple(args.from_run),
                       calibrate=not args.no_calibrate, drift=drift, command_line=("harness", *sys.argv[1:]))
    res = run_nightly(o)
    if args.json:
        print_json(res.to_dict())
    else:
        for s, st, d in res.steps:
            if st != "done":
                print(f"{st}: {s}: {d}")
        for r in sorted(res.drift, key=lambda r: r.constant):
            print(summary_line(r))
        print(f"report: {res.report}")
    if res.drifted:
        names = ", ".join(f"{r.constant} ({r.change_rel * 100:+.1f}%)" for r in res.drifted)
        raise RegressionError(f"{len(res.drifted)} constant(s) drifted on {res.machine}: {names}; report: {res.report}")
    return 0
