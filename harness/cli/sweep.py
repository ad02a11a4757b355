"""Sweep a target's settings with one workload and score each: reward, goodput, best setting, Pareto front.

  harness sweep --target embedded,scenario=workloads/scenarios/ch9-hetero-pd.toml,startup_s=0,time_scale=0.1 \\
      --grid mode=pd,colocated --grid scenario.workload.decode_batch=8,32 --rate 3 --duration-s 30 --sla-s 2
  harness sweep --target llama-cpp-gemma3-270m --grid llama_cpp.batch_size+llama_cpp.ubatch_size=32,128,512 \\
      --input-tokens 512 --output-tokens 32 --rate 0.5 --duration-s 30 --latency ttft --sla-s 2

reward = output tokens/s − λ·max(0, p95 latency − SLA) (Chapter 19, §19.7), λ = --lambda, latency =
--latency (ttft, tpot, itl or e2e), SLA = --sla-s; goodput counts requests meeting --slo-ttft-s and
--slo-tpot-s. A search over the grid, not reinforcement learning. Times of the embedded target are
its simulated seconds. Method and fields: docs/ch19.md.
"""

from __future__ import annotations

import argparse
import sys

from harness.cli._output import print_json
from harness.report.sweep import render_table
from harness.sweep.run import SweepOptions, default_progress, run_sweep


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    a = parser.add_argument
    a("--target", required=True, help="engine config[,section.key=value...] or embedded[,scenario=PATH,time_scale=X,...]")
    a("--grid", action="append", default=[], metavar="KEY=V1,V2", help="one axis of the grid (repeat for more); K1+K2=... sets keys together")
    a("--duration-s", type=float, default=20.0, help="schedule length in the target's seconds (default 20)")
    a("--rate", type=float, default=1.0, help="arrival rate, requests per target second (default 1)")
    a("--schedule", default="constant", choices=["constant", "poisson", "gamma"], help="arrival process (default constant)")
    a("--input-tokens", type=int, default=256, help="prompt tokens per request (default 256)")
    a("--output-tokens", type=int, default=32, help="output tokens per request (default 32)")
    a("--latency", default="ttft", choices=["ttft", "tpot", "itl", "e2e"], help="latency whose p95 enters the reward (default ttft)")
    a("--sla-s", type=float, default=1.0, help="latency target in seconds for the reward (default 1)")
    a("--lambda", dest="lam", type=float, default=100.0, help="penalty, tokens/s per second of p95 over the SLA (default 100)")
    a("--slo-ttft-s", type=float, default=None, help="goodput SLO on TTFT (default: the --sla-s when --latency ttft)")
    a("--slo-tpot-s", type=float, default=None, help="goodput SLO on TPOT")
    a("--seed", type=int, default=0)
    a("--api", default="chat", choices=["chat", "completions"])
    a("--max-concurrency", type=int, default=256, help="cap on requests in flight (default 256)")
    a("--request-timeout-s", type=float, default=120.0)
    a("--warmup-s", type=float, default=0.0, help="exclude requests intended before this (target seconds)")
    a("--out", default="results", help="results directory (default results/)")
    a("--json", action="store_true", help="print the result as JSON")
    a("--quiet", action="store_true", help="no progress lines")


def main(args: argparse.Namespace) -> int:
    slo_ttft = args.slo_ttft_s if args.slo_ttft_s is not None else (args.sla_s if args.latency == "ttft" else None)
    o = SweepOptions(
        target=args.target, grid=tuple(args.grid), duration_s=args.duration_s, rate_per_s=args.rate, schedule=args.schedule,
        input_tokens=args.input_tokens, output_tokens=args.output_tokens, seed=args.seed, api=args.api, latency=args.latency,
        sla_s=args.sla_s, lam=args.lam, slo_ttft_s=slo_ttft, slo_tpot_s=args.slo_tpot_s, max_concurrency=args.max_concurrency,
        request_timeout_s=args.request_timeout_s, warmup_s=args.warmup_s, results_dir=args.out,
        command_line=("harness", *sys.argv[1:]),
    )
    res = run_sweep(o, progress=None if (args.quiet or args.json) else default_progress)
    if args.json:
        print_json(res.to_dict())
        return 0
    print(render_table(res.to_dict(), o.latency))
    return 0
