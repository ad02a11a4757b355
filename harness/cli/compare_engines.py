"""Replay one workload artifact against two targets (URLs, engine configs or the embedded target), then compare.

  harness compare-engines --a llama-cpp-gemma3-270m,llama_cpp.parallel=1 \
                          --b llama-cpp-gemma3-270m,llama_cpp.parallel=4 --duration-s 30 --rate 0.5
  harness compare-engines --a http://10.0.0.1:8000 --b http://10.0.0.2:8000 --rate 1,2,4 --fail-on ttft_p99_s:5%
  harness compare-engines --a embedded,itl_s=0.02 --b embedded,itl_s=0.03 --duration-s 10

A target: http(s)://..., CONFIG[,section.key=value,...] (workloads/engines/ name or TOML, launched here),
or embedded[,profile=fixed|scenario,ttft_s=...,itl_s=...,scenario=PATH,time_scale=...]. A is the baseline.
Exit codes: 0 ok, 1 user or data error, 3 a gate breached, 4 a gate inconclusive (measure longer).
"""

from __future__ import annotations

import argparse
import sys

from harness.bench.compare_engines import CompareEnginesOptions, compare_engines, parse_target
from harness.bench.progress import LoadProgress
from harness.cli.compare import add_compare_options, finish
from harness.compare.compare import CompareOptions, compare_runs
from harness.compare.gates import check_known, parse_gates
from harness.compare.runs import LOAD_METRICS


def _rates(raw: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rate must be requests per second, comma-separated for a sweep (e.g. 1,2,4), got {raw!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    a = parser.add_argument
    a("--a", required=True, metavar="TARGET", help="baseline target: URL, CONFIG[,k=v...] or embedded[,k=v...]")
    a("--b", required=True, metavar="TARGET", help="candidate target, same forms")
    a("--label-a", default=None, help="name of A in the report (default 'A: <target>')")
    a("--label-b", default=None, help="name of B in the report (default 'B: <target>')")
    a("--duration-s", type=float, default=20.0, help="schedule length per rate in seconds (default 20)")
    a("--rate", type=_rates, default=(1.0,), help="arrival rate in requests/s; comma-separated for a sweep (default 1)")
    a("--schedule", choices=["poisson", "constant", "gamma"], default="poisson", help="arrival process (default poisson)")
    a("--input-tokens", type=int, default=64, help="prompt tokens per request (default 64)")
    a("--output-tokens", type=int, default=16, help="max_tokens per request, with ignore_eos (default 16)")
    a("--workload", default=None, help="replay this workload artifact (.parquet) instead of building one")
    a("--workload-seed", type=int, default=0, help="seed of the built workload (default 0)")
    a("--api", choices=["chat", "completions"], default="chat")
    a("--max-concurrency", type=int, default=64, help="cap on requests in flight (default 64)")
    a("--request-timeout-s", type=float, default=60.0, help="per-request timeout (default 60)")
    a("--warmup-s", type=float, default=0.0, help="leave out requests intended before this (default 0)")
    a("--slo-ttft-s", type=float, default=None, help="TTFT SLO for goodput (default: no goodput)")
    a("--slo-tpot-s", type=float, default=None, help="TPOT SLO for goodput")
    a("--out", default="results", help="results directory (default results/)")
    a("--quiet", action="store_true", help="no progress line")
    add_compare_options(parser)


def main(args: argparse.Namespace) -> int:
    gates = parse_gates(args.fail_on)
    check_known(gates, list(LOAD_METRICS))  # a typo'd metric before the engines run
    parse_target(args.a, "--a")  # refuse a bad target before any work
    parse_target(args.b, "--b")
    copts = CompareOptions(n_boot=args.bootstrap, seed=args.seed, confidence=args.confidence, min_effect=args.min_effect)
    o = CompareEnginesOptions(
        a=args.a, b=args.b, duration_s=args.duration_s, rates_per_s=args.rate, schedule=args.schedule,
        input_tokens=args.input_tokens, output_tokens=args.output_tokens, workload_path=args.workload, seed=args.workload_seed,
        api=args.api, max_concurrency=args.max_concurrency, request_timeout_s=args.request_timeout_s, warmup_s=args.warmup_s,
        slo_ttft_s=args.slo_ttft_s, slo_tpot_s=args.slo_tpot_s, label_a=args.label_a, label_b=args.label_b,
        results_dir=args.out, command_line=("harness", *sys.argv[1:]),
    )
    res = compare_engines(o, progress=None if args.quiet or args.json else LoadProgress())
    if not args.json:
        for d in res.ordered:
            print(f"run: {d}")
    return finish(compare_runs(res.ordered, copts), args, gates)
