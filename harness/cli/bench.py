"""Drive end-to-end load against the embedded PD target (simulated) or a real deployment, then report.

Default: the chapter's 4×A100 + 4×H20 scenario emulated locally, evenly spaced arrivals at the scenario's
rate for 60 s, run to results/, report to reports/<run_id>/. --target URL measures a real
OpenAI-compatible server instead (the API key is read from the variable named by --api-key-env).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli._output import print_json
from harness.units import fmt_ms

# the chapter's scenario, found from any working directory
DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "ch9-hetero-pd.toml"


def _opt_float(text: str) -> float | None:
    """A float, or None for an empty string (so `make bench-pd RATE=` means "the scenario's rate")."""
    if text.strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Empty strings for --target and the metrics URLs mean "not given" (Makefile variables may be empty)."""
    a = parser.add_argument
    a("--scenario", default=str(DEFAULT_SCENARIO), help="PD scenario TOML (default: the chapter's, workloads/scenarios/ch9-hetero-pd.toml)")
    a("--target", default=None, help="http(s) URL of an OpenAI-compatible server; default: start the embedded simulated target")
    a("--metrics-url", default=None, help="Prometheus /metrics of the target (default TARGET/metrics)")
    a("--prefill-metrics-url", default=None, help="/metrics of the prefill pool of a PD deployment")
    a("--decode-metrics-url", default=None, help="/metrics of the decode pool of a PD deployment")
    a("--duration-s", type=_opt_float, default=60.0, help="schedule length in seconds (default 60)")
    a("--rate", type=_opt_float, default=None, help="arrival rate, requests/s (default: the scenario's arrival_rate_per_s)")
    a("--schedule", default="constant", choices=["constant", "poisson", "gamma"], help="arrival process (default constant, as the §9.6.1 fluid model; gamma: cv 2, bursty)")
    a("--mix", default="scenario", help="request mix: scenario, reasoning, prefix-6144, short-output, mix-1025-4097, multi-turn, startup-burst")
    a("--workload", default=None, help="replay this workload artifact (.parquet) instead of building one")
    a("--seed", type=int, default=0)
    a("--api", default="chat", choices=["chat", "completions"])
    a("--model-name", default=None, help="model name to send (default: the scenario's model)")
    a("--api-key-env", default=None, help="NAME of the environment variable holding the API key (the key is never stored)")
    a("--workers", type=int, default=0, help="Locust worker processes (0: one local process)")
    a("--max-concurrency", type=int, default=512, help="cap on requests in flight (a cap, not the pacing)")
    a("--request-timeout-s", type=float, default=120.0)
    a("--time-scale", type=float, default=1.0, help="embedded target: wall seconds per simulated second")
    a("--startup-s", type=float, default=None, help="embedded target: simulated startup (default: the scenario's startup_s)")
    a("--allocation", default="best", help="embedded target: 'best' or a reference allocation of the scenario")
    a("--warmup-s", type=float, default=0.0, help="exclude requests intended before this (default 0: the startup is the point)")
    a("--cooldown-s", type=float, default=0.0)
    a("--slo-ttft-s", type=float, default=5.0)
    a("--slo-tpot-s", type=float, default=0.05)
    a("--slo-e2e-s", type=float, default=None)
    a("--out", default="results", help="results directory (default results/)")
    a("--report-dir", default="reports", help="reports directory (default reports/); '' to skip the report")
    a("--json", action="store_true", help="print the result as JSON")
    a("--quiet", action="store_true", help="no progress display (CI); without a terminal the display is one plain line every 10 s")


def main(args: argparse.Namespace) -> int:
    from harness.bench.pd import BenchPdOptions, bench_pd
    from harness.bench.progress import SIMULATED_NOTE, LoadProgress

    opts = BenchPdOptions(
        scenario=args.scenario, target_url=args.target or None, metrics_url=args.metrics_url or None,
        prefill_metrics_url=args.prefill_metrics_url or None, decode_metrics_url=args.decode_metrics_url or None,
        duration_s=60.0 if args.duration_s is None else args.duration_s, rate_per_s=args.rate, schedule=args.schedule,
        mix=args.mix, workload_path=args.workload, seed=args.seed, api=args.api, model_name=args.model_name,
        api_key_env=args.api_key_env, workers=args.workers, max_concurrency=args.max_concurrency,
        request_timeout_s=args.request_timeout_s, time_scale=args.time_scale, startup_s=args.startup_s,
        allocation=args.allocation, warmup_s=args.warmup_s, cooldown_s=args.cooldown_s, slo_ttft_s=args.slo_ttft_s,
        slo_tpot_s=args.slo_tpot_s, slo_e2e_s=args.slo_e2e_s, results_dir=args.out, report_dir=args.report_dir or None,
        command_line=list(sys.argv),
    )
    res = bench_pd(opts, progress=None if args.quiet or args.json else LoadProgress())
    if args.json:
        print_json(res.to_dict())
        return 0
    s = res.summary
    print(f"target: {res.target}")
    print(f"run: {res.run_dir}")
    for p in res.report_paths:
        print(f"report: {p}")
    print(f"throughput {s['request_throughput_per_s']:.3f} req/s, {s['output_tokens_per_s']:.0f} output tokens/s; "
          f"TTFT p50 {_ms(s['ttft_s']['p50'])} p99 {_ms(s['ttft_s']['p99'])}; TPOT p50 {_ms(s['tpot_s']['p50'])}; "
          f"goodput {s['goodput_per_s'] if s['goodput_per_s'] is not None else float('nan'):.3f} req/s")
    if not s["valid"]:
        print("warning: the run is INVALID: " + "; ".join(s["invalid_reasons"]), file=sys.stderr)
    if res.simulated:
        print(SIMULATED_NOTE)  # the last line: a simulated figure says it is simulated
    return 0


_ms = fmt_ms

