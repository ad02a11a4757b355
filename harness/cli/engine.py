"""Start, health-check and stop a serving engine from a config; measure its time-to-ready (§9.6.1).

  harness engine llama-cpp-gemma3-270m              launch, measure, store results/<machine>/<run>/, stop
  harness engine workloads/engines/vllm-qwen3-8b-pd.toml --dry-run   print the exact commands
  harness engine CONFIG --check                     validate the config only
  harness engine CONFIG --serve                     keep serving until Ctrl-C (point a workload at it)

CONFIG is a TOML file or the name of one in workloads/engines/ (format: docs/engines.md).
"""

from __future__ import annotations

import argparse
import math
import sys

from harness.cli._output import print_json
from harness.engines.config import load_engine_config
from harness.engines.session import make_plan, run_session
from harness.errors import HarnessError


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
    b.add_argument("--api", default="both", choices=["chat", "completions", "both"], help="streaming API(s) to drive (default both)")
    b.add_argument("--report-dir", default="reports", help="bench-pd reports folder (default: %(default)s)")
    parser.add_argument("--hold-s", type=float, default=0.0, help="keep serving this many seconds after measuring (default 0)")
    parser.add_argument("--port", type=int, default=None, help="client-facing port, overriding server.port")
    parser.add_argument("--results", default="results", help="results folder (default: %(default)s)")
    parser.add_argument("--no-store", action="store_true", help="measure without writing a run")
    parser.add_argument("--log-dir", default=None, help="where the engine's logs go (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _dry_run_text(plan) -> str:
    lines = [f"# {plan.config_name}: {plan.engine}, mode {plan.mode}, endpoint {plan.endpoint} (model {plan.served_name})"]
    for p in plan.processes:
        lines.append(f"# {p.role}: health {p.base_url}{p.health_path}" + (f", metrics {p.base_url}{p.metrics_path}" if p.metrics_path else ""))
        lines.append(p.shell())
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.port is not None and not (1 <= args.port <= 65535):
        raise HarnessError(f"--port must be between 1 and 65535, got {args.port}.")
    if not math.isfinite(args.hold_s) or args.hold_s < 0:
        raise HarnessError(f"--hold-s must be a finite number of seconds >= 0, got {args.hold_s!r}; use --serve to serve until interrupted.")
    cfg = load_engine_config(args.config)
    if args.check:
        plan = make_plan(cfg, resolve=False, port=args.port)
        missing = None
        if cfg.engine == "llama.cpp":
            from harness.engines.llama_cpp import binary_available  # noqa: PLC0415

            missing = binary_available(cfg.options.binary)  # type: ignore[attr-defined]
        out = {"config": cfg.source, "name": cfg.name, "engine": cfg.engine, "mode": cfg.base.mode,
               "processes": [p.role for p in plan.processes], "installed": missing is None, "not_installed_reason": missing}
        if args.json:
            print_json(out)
        else:
            print(f"ok: {cfg.name} ({cfg.engine}, mode {cfg.base.mode}): {len(plan.processes)} process(es): {', '.join(out['processes'])}")
            if missing:
                print(f"note: {missing}")
        return 0
    if args.dry_run:
        plan = make_plan(cfg, resolve=False, port=args.port)
        if args.json:
            print_json({"config": cfg.name, "engine": cfg.engine, "mode": plan.mode, "endpoint": plan.endpoint,
                        "served_name": plan.served_name, "processes": [p.to_dict() for p in plan.processes]})
        else:
            print(_dry_run_text(plan))
        return 0

    benches: list = []

    def announce(eng) -> dict | None:
        t = eng.time_to_ready
        print(f"ready: {eng.plan.endpoint} (model {eng.plan.served_name}) in {t.ready_s:.3f} s", file=sys.stderr)
        if args.serve:
            print("serving; Ctrl-C stops it", file=sys.stderr)
        sys.stderr.flush()
        if not args.bench_pd:
            return None
        from harness.bench.engine import DEFAULT_SCENARIO, bench_pd_against  # noqa: PLC0415

        for api in (["chat", "completions"] if args.api == "both" else [args.api]):
            benches.append(bench_pd_against(eng, scenario=args.scenario or DEFAULT_SCENARIO, duration_s=args.duration_s,
                                            rate_per_s=args.rate, api=api, results_dir=args.results,
                                            report_dir=args.report_dir or None))
        return {"bench_pd": [b.to_dict() for b in benches]}

    res = run_session(
        cfg, results_dir=None if args.no_store else args.results, hold_s=math.inf if args.serve else args.hold_s,
        port=args.port, log_dir=args.log_dir, on_ready=announce, command_line=["harness", *sys.argv[1:]],
    )
    if args.json:
        print_json(res.to_dict())
        return 0
    t = res.time_to_ready
    e = res.engine
    rel = f", release {e['release']}" if e.get("release") else ""
    print(f"engine      {e.get('name')} version {e.get('version')} ({e.get('commit') or 'commit unknown'}{rel})")
    print(f"endpoint    {res.endpoint}  model {e.get('served_name')}")
    print(f"healthy     {t.healthy_s:8.3f} s after spawn")
    print(f"first reply {t.first_request_s:8.3f} s after spawn (time-to-ready; the request took {t.probe_latency_s:.3f} s)")
    for role, n in res.metrics.items():
        print(f"metrics     {role}: {n} samples")
    for n in res.notes:
        print(f"note        {n}")
    print(f"stopped     {', '.join(f'{r}: exit {c}' for r, c in res.stop_codes.items())}")
    if res.run_dir:
        print(f"stored      {res.run_dir}")
    if benches:
        from harness.engines.crosscheck import render_rows  # noqa: PLC0415

        for bc in benches:
            s = bc.summary
            print(f"\nbench-pd ({bc.api}): {bc.run_dir}")
            print(f"  {s['requests_ok']} ok of {s['requests_total']}, {s['output_tokens_per_s']:.1f} output tokens/s; "
                  "the bench-pd report's model column is the GPU PD plan of the scenario, not a CPU prediction")
            print("  client vs engine (llama.cpp /metrics deltas over the run):")
            print("".join("  " + ln + "\n" for ln in render_rows(bc.rows).splitlines()), end="")
    return 0
