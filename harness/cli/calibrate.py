"""Fit the model's constants from one machine's micro runs into calibration/<machine>.json or the GPU database."""

from __future__ import annotations

import argparse

from harness.calibration.calibrate import calibrate, parse_proxy
from harness.calibration.gpu_db import db_dir, entries, grid_count, load_entry, shown_path, summary_rows
from harness.cli._output import print_json
from harness.errors import HarnessError
from harness.report.calibration_summary import render_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="?",
                        help="results/<machine>/, one run directory, or results/ when it holds one machine's micro runs")
    parser.add_argument("--out", metavar="FILE", help="calibration file to write, or a directory for <dir>/<machine>.json (default calibration/<machine>.json)")
    parser.add_argument("--into-db", nargs="?", const="", default=None, metavar="DIR",
                        help="file the fit into the GPU calibration database as <DIR>/<gpu>/<family>.json, with the runs' "
                             "provenance (default DIR: calibration/gpus/, or $HARNESS_CALIBRATION_DB)")
    parser.add_argument("--replace", action="store_true",
                        help="with --into-db: overwrite an entry even when it holds newer constants")
    parser.add_argument("--list-db", nargs="?", const="", default=None, metavar="DIR",
                        help="list the GPU calibration database's entries (path, source, date, age) and exit")
    parser.add_argument("--model", default=None,
                        help="model whose shapes imported kernel grids are read at (catalog name; default qwen3-8b, "
                             "the shapes `harness micro run` measures on a GPU)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap resamples per constant (default 200)")
    parser.add_argument("--proxy", action="append", metavar="TARGET=MEASURED",
                        help="let a measured device or link stand for a catalog GPU or link the model plans for "
                             "(e.g. a100-80gb-sxm=cpu, nic-200g=pcie:h2d); repeatable")
    parser.add_argument("--json", action="store_true", help="print the whole calibration record as JSON")


def main(args: argparse.Namespace) -> int:
    if args.list_db is not None:
        return list_db(args.list_db or None, args.json)
    if not args.results:
        raise HarnessError("give the runs to fit: `harness calibrate results/<machine>/` (or --list-db to list the GPU "
                           "calibration database).")
    into_db = args.into_db is not None
    rec, path = calibrate(args.results, args.out, args.seed, args.bootstrap, parse_proxy(args.proxy), into_db=into_db,
                          db_dir=args.into_db or None, replace_newer=args.replace, model=args.model)
    if args.json:
        print_json(rec.to_dict())
    else:
        print(render_summary(rec, str(path)))
        if into_db:
            print(f"filed into the GPU calibration database: {load_entry(path).describe()}")
    return 0


def list_db(directory: str | None, as_json: bool) -> int:
    found = entries(db_dir=directory)
    if as_json:
        print_json(summary_rows(found))
        return 0
    if not found:
        print(f"no entries in {shown_path(db_dir(directory))}/")
        return 0
    for e in found:
        what = [f"{len(e.record.curves)} curves"] + ([f"{len(e.record.links)} links"] if e.record.links else []) + (
            [f"{len(e.record.collectives)} collectives"] if e.record.collectives else []) + (
            [f"{grid_count(e.record.kernel_tables)} kernel grids"] if e.record.kernel_tables is not None else [])
        print(f"{e.gpu:14s} {e.family:24s} {e.describe()} [{', '.join(what)}]")
    return 0
