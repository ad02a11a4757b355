"""Start, health-check and stop a serving engine from a config; measure its time-to-ready (§9.6.1).

  harness engine llama-cpp-gemma3-270m              launch, measure, store results/<machine>/<run>/, stop
  harness engine workloads/engines/vllm-qwen3-8b-pd.toml --dry-run   print the exact commands
  harness engine CONFIG --check                     validate the config only
  harness engine CONFIG --serve                     keep serving until Ctrl-C (point a workload at it)

CONFIG is a TOML file or the name of one in workloads/engines/ (format: docs/engines.md).
"""

from __future__ import annotations

import argparse
import sys

from harness.bench import engine as uc
from harness.cli._output import print_json
from harness.engines.config import load_engine_config
from harness.errors import HarnessError
from harness.report import engine as text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("config", help="engine config: a TOML file or a name in workloads/engines/")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="validate the config and say whether the engine is installed")
    what.add_argument("--dry-run", action="store_true", help="print the exact commands (with their environment) and exit")
    what.add_argument("--serve", action="store_true", help="after measuring, keep serving until interrupted (Ctrl-C)")
    what.add_argument("--bench-pd", action="store_true",
                      help="run the load generator's bench-pd against the engine and cross-check it with the engine's /metrics")
    b = parser.add_argument_group("--bench-pd options")
    b.add_argument("--scenario", default=None, help="bench-pd scenario (default: workloads/engines/bench-pd-cpu-gemma3.toml)")
    b.add_argument("--duration-s", type=float, default=20.0, help="bench-pd schedule length (default 20)")
    b.add_argument("--rate", type=float, default=None, help="arrival rate, requests/s (default: the scenario's)")
    b.add_argument("--request-timeout-s", type=float, default=120.0,
                   help="a request without its last byte by then is recorded as a timeout (default 120)")
    b.add_argument("--api", default="both", choices=["chat", "completions", "both"], help="streaming API(s) to drive (default both)")
    b.add_argument("--report-dir", default="reports", help="bench-pd reports folder (default: %(default)s)")
    b.add_argument("--calibration", default=None, metavar="FILE", help="predict each bench-pd run with the engine's digital twin "
                   "(SIMULATED, before the run): a twin.json of `harness loop cpu|gpu`, or a step-time calibration "
                   "(`make step-time`), whose scheduler settings come from CONFIG")
    b.add_argument("--proxy", action="store_true", help="with --calibration: allow a calibration of another host, kernel family, "
                   "thread count, model or scheduler settings (the report says PROXY)")
    parser.add_argument("--hold-s", type=float, default=0.0, help="keep serving this many seconds after measuring (default 0)")
    parser.add_argument("--port", type=int, default=None, help="client-facing port, overriding server.port")
    parser.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    parser.add_argument("--no-store", action="store_true", help="measure without writing a run")
    parser.add_argument("--log-dir", default=None, help="where the engine's logs go (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    uc.check_session_flags(args.port, args.hold_s)
    cfg = load_engine_config(args.config)
    if args.check:
        c = uc.check_engine(cfg, args.port)
        _out(args, c.to_dict(), lambda: text.render_check(c))
        return 0
    if args.dry_run:
        plan = uc.dry_run_plan(cfg, args.port)
        _out(args, uc.dry_run_dict(cfg, plan), lambda: text.render_dry_run(plan))
        return 0
    bench = None
    if args.bench_pd:
        bench = uc.EngineBenchRequest(scenario=args.scenario or uc.DEFAULT_SCENARIO, duration_s=args.duration_s,
                                      rate_per_s=args.rate, apis=["chat", "completions"] if args.api == "both" else [args.api],
                                      results_dir=args.results, report_dir=args.report_dir or None,
                                      calibration=args.calibration or None, engine_config=cfg.source, proxy=args.proxy,
                                      request_timeout_s=args.request_timeout_s)
    elif args.calibration or args.proxy:
        raise HarnessError("--calibration and --proxy predict a bench-pd run; give --bench-pd too, or drop them.")
    res, benches = uc.engine_session(cfg, results_dir=None if args.no_store else args.results, serve=args.serve,
                                     hold_s=args.hold_s, port=args.port, log_dir=args.log_dir, bench=bench,
                                     command_line=["harness", *sys.argv[1:]], notify=_notify)
    _out(args, res.to_dict(), lambda: text.render_session(res, benches))
    return 0


def _out(args: argparse.Namespace, data: dict, render) -> None:
    if args.json:
        print_json(data)
    else:
        print(render())


def _notify(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
