"""Run microbenchmark suites into results/, list them, or import another tool's JSON into the same tables."""

from __future__ import annotations

import argparse
import math
import sys

from harness.calibration.calibrate import calibrate
from harness.calibration.gpu_db import load_entry
from harness.cli._output import print_json
from harness.errors import HarnessError
from harness.importers import aic, import_to_run
from harness.importers.device_run import import_device_run
from harness.report.micro import render_summary
from harness.specs.host import detect_host
from microbench.backends import detect_backends
from microbench.params import describe
from microbench.progress import ProgressBar
from microbench.runner import run_micro
from microbench.suite import SUITES, suite_module


def _positive_float(name: str):
    def conv(raw: str) -> float:
        try:
            v = float(raw)
        except ValueError:
            v = float("nan")
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive number of seconds, got {raw!r}")
        return v

    return conv


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="micro_cmd", metavar="SUBCOMMAND")
    sub.required = True
    r = sub.add_parser("run", help="run suites and store a run directory", description="Run microbenchmark suites.")
    r.add_argument("--suite", required=True, help="suite name(s), comma-separated, or 'all' (see `harness micro list`)")
    r.add_argument("--quick", action="store_true", help="small sizes and a short time budget (the CI form)")
    r.add_argument("--out", default="results", help="results directory (default: results/)")
    r.add_argument("--budget-s", type=_positive_float("--budget-s"), default=None, help="timed seconds per case (default 1.0, --quick 0.15)")
    r.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="which devices to measure (default: all present)")
    r.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    r.add_argument("--storage-path", default=None, help="directory the storage suite writes its test file in (default: --out)")
    r.add_argument("--model", default="qwen3-8b", help="model whose shapes gemm/decode/stage use on a GPU (catalog name or config.json)")
    r.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")
    r.add_argument("--json", action="store_true", help="print the run summary as JSON")
    r.set_defaults(_micro_main=main_run)

    ls = sub.add_parser("list", help="list suites and the backends present here")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(_micro_main=main_list)

    im = sub.add_parser("import", help="import nvbandwidth -j, nccl-tests -J, pytest-benchmark JSON, perftest "
                        "(ib_write_bw/ib_read_bw text or --out_json) or nixlbench output as a run")
    im.add_argument("format", choices=["nvbandwidth", "nccl-tests", "pytest-benchmark", "perftest", "nixlbench"])
    im.add_argument("file", help="the tool's output file (perftest: also a directory of --out_json files, one per size)")
    im.add_argument("--units", choices=["MiB/s", "Gb/s"], default=None,
                    help="perftest --out_json only: the BW unit of the run (default MiB/s, perftest's own; Gb/s for "
                    "--report_gbits)")
    im.add_argument("--out", default="results", help="results directory (default: results/)")
    im.add_argument("--machine", default=None, help="results/<machine>/ of the machine the tool measured on "
                    "(default: the GPU the file names + this host's CPU)")
    im.add_argument("--json", action="store_true", help="print the summary as JSON")
    im.set_defaults(_micro_main=main_import)

    pr = sub.add_parser("params", help="list the typed params records calibration reads (record, field, type, unit)")
    pr.add_argument("--json", action="store_true", help="print JSON")
    pr.set_defaults(_micro_main=main_params)

    dv = sub.add_parser("import-device", help="file a returned device-check run.tar.gz into results/ under the device's "
                        "machine name")
    dv.add_argument("tarball", help="run.tar.gz from microbench/device_check.sh's output folder, or that folder")
    dv.add_argument("--out", default="results", help="results directory (default: results/)")
    dv.add_argument("--into-db", default=None, metavar="DIR",
                    help="GPU calibration database the runs are fitted and filed into (default: calibration/gpus/, or "
                         "$HARNESS_CALIBRATION_DB)")
    dv.add_argument("--no-db", action="store_true", help="file the runs into results/ only, not into the GPU database")
    dv.add_argument("--json", action="store_true", help="print what was filed as JSON")
    dv.set_defaults(_micro_main=main_import_device)

    ai = sub.add_parser("import-aic", help="import aiconfigurator's kernel database (pip install -e '.[aic]') as runs of "
                        "kernel family aic-<engine>-<version>, one per GPU and engine")
    ai.add_argument("path", nargs="?", help="aiconfigurator_core's systems/data directory (default: the installed package)")
    ai.add_argument("--system", action="append", metavar="NAME",
                    help="aiconfigurator system to import (h200_sxm, h100_sxm, a100_sxm, ...); repeatable (default: every "
                         "system whose GPU has a spec here)")
    ai.add_argument("--engine", action="append", metavar="ENGINE[@VERSION]",
                    help="trtllm, vllm or sglang, optionally @VERSION; repeatable (default: all three, newest version)")
    ai.add_argument("--out", default="results", help="results directory (default: results/)")
    ai.add_argument("--into-db", nargs="?", const="", default=None, metavar="DIR",
                    help="also fit each run and file it into the GPU calibration database (default DIR: calibration/gpus/)")
    ai.add_argument("--model", default=None, help="model whose shapes the kernel grid is read at (default qwen3-8b)")
    ai.add_argument("--list", action="store_true", help="list the systems, engines and versions the data holds, and exit")
    ai.add_argument("--json", action="store_true", help="print what was filed as JSON")
    ai.set_defaults(_micro_main=main_import_aic)


def main(args: argparse.Namespace) -> int:
    return args._micro_main(args)


def main_run(args: argparse.Namespace) -> int:
    bar = ProgressBar(force=args.progress)
    summary = run_micro(
        args.suite, quick=args.quick, out=args.out, budget_s=args.budget_s, device=args.device, seed=args.seed,
        storage_path=args.storage_path, progress=bar, command_line=["harness", *sys.argv[1:]],
        options={"model": args.model},
    )
    if args.json:
        print_json(summary.to_dict())
        return 0
    print(render_summary(summary.to_dict()))
    return 0


def main_list(args: argparse.Namespace) -> int:
    host = detect_host()
    det = detect_backends(host)
    data = {
        "suites": {n: suite_module(n).DESCRIPTION for n in SUITES},
        "backends": [b.label for b in det.backends],
        "missing_backends": {b: r for b, r in det.missing},
        "host": host.to_dict(),
    }
    if args.json:
        print_json(data)
        return 0
    print("suites:")
    for n, d in data["suites"].items():
        print(f"  {n:10s} {d}")
    print(f"backends here: {', '.join(data['backends']) or 'none'}")
    for b, r in data["missing_backends"].items():
        print(f"  missing {b}: {r}")
    print(f"host: {host.cpu_model}, {host.usable_cores} usable cores; {host.source}")
    return 0


def main_import(args: argparse.Namespace) -> int:
    options = {"units": args.units} if args.units else {}
    if options and args.format != "perftest":
        raise HarnessError(f"--units applies to perftest imports only, not {args.format}; leave it out.")
    summary = import_to_run(args.format, args.file, args.out, command_line=["harness", *sys.argv[1:]], machine=args.machine, **options)
    if args.json:
        print_json(summary)
    else:
        print(f"imported {summary['cases']} case(s) from {args.file} ({args.format}) -> {summary['path']}")
        if summary["skipped"]:
            print(f"skipped {len(summary['skipped'])} test case(s):")
            for sk in summary["skipped"]:
                print(f"  {sk['case']}: {sk['reason']}")
    return 0



def main_import_device(args: argparse.Namespace) -> int:
    summary = import_device_run(args.tarball, args.out)
    if not args.no_db:
        summary["database"] = file_runs_into_db([r["path"] for r in summary["runs"]], args.into_db)
    if args.json:
        print_json(summary)
        return 0
    for r in summary["runs"]:
        print(f"filed {r['run_id']} ({r['status']}) -> {r['path']}")
    print(f"checks: {', '.join(summary['checks']) or 'none'}")
    _print_db(summary.get("database", []))
    return 0


def file_runs_into_db(paths: list[str], db_dir: str | None, model: str | None = None) -> list[dict]:
    """Fit each run and file it into the GPU calibration database; a run that cannot be filed says why (on stderr too)
    and stays in results/ (file it later with `harness calibrate RUN --into-db`)."""
    out = []
    for p in paths:
        try:
            _, entry_path = calibrate(p, into_db=True, db_dir=db_dir or None, model=model,
                                      command=" ".join(["harness", *sys.argv[1:]]))
        except HarnessError as exc:
            why = str(exc)
            print(f"warning: {p} not filed into the GPU calibration database: {why} (it stays in results/; file it later "
                  f"with `harness calibrate {p} --into-db`)", file=sys.stderr)
            out.append({"run": p, "filed": False, "reason": why})
            continue
        out.append({"run": p, "filed": True, "entry": str(entry_path), "describe": load_entry(entry_path).describe()})
    return out


def _print_db(rows: list[dict]) -> None:
    for d in rows:
        if d["filed"]:
            print(f"into the GPU calibration database: {d['describe']}")


def main_import_aic(args: argparse.Namespace) -> int:
    if args.list:
        root = aic.data_root(args.path)
        listing = aic.listing(root, args.system)
        if args.json:
            print_json(listing)
            return 0
        print(f"{root}:")
        for row in listing:
            spec = row["gpu_spec"] or f"no GPU spec for {row['device']!r}: not imported by default"
            print(f"  {row['system']:20s} {row['engine']:7s} {row['version']:11s} {spec:16s} {', '.join(row['tables'])}")
        return 0
    filed = aic.import_aic(args.path, args.system, args.engine, args.out, command_line=["harness", *sys.argv[1:]])
    if args.into_db is not None:
        db = file_runs_into_db([f["path"] for f in filed], args.into_db, args.model)
        for f, d in zip(filed, db):
            f["database"] = d
    if args.json:
        print_json(filed)
        return 0
    for f in filed:
        flagged = {t: n for t, n in f["above_peak"].items() if n}
        print(f"imported {sum(f['rows'].values())} case(s) of {f['system']} ({f['gpu_name']}), family {f['family']} -> "
              f"{f['path']}" + (f"; above the spec peak, flagged: {flagged}" if flagged else ""))
        for note in f["notes"]:
            print(f"  note: {note}")
        for sk in f["skips"]:
            print(f"  skipped {sk['case']} of {sk['suite']}: {sk['reason']}")
        if "database" in f:
            _print_db([f["database"]])
    return 0


def main_params(args: argparse.Namespace) -> int:
    rows = describe()
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        unit = f" [{r['unit']}]" if r["unit"] else ""
        print(f"{r['record']:22s} {r['name']:24s} {r['type']:32s}{unit} {r['doc']}")
    return 0
