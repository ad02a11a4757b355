"""Export a run's tables as CSV or JSON lines (`harness export RUN --csv`; pandas recipe in docs/loadgen.md)."""

from __future__ import annotations

import argparse
import sys

from harness.export import export_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("run", help="the run directory (results/<machine>/<run_id>)")
    fmt = parser.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--csv", dest="fmt", action="store_const", const="csv", help="CSV (list columns as JSON arrays)")
    fmt.add_argument("--jsonl", dest="fmt", action="store_const", const="jsonl", help="one JSON object per row")
    a("--table", action="append", default=None, help="table to export (repeatable; default requests; e.g. workload, server_metrics)")
    a("--out", default=None, help="file (one table) or directory (several); default stdout")


def main(args: argparse.Namespace) -> int:
    written = export_run(args.run, args.fmt, tables=args.table, out=args.out)
    if args.out is not None:
        for w in written:
            print(f"wrote {w}", file=sys.stderr)
    return 0
