"""Drive end-to-end load against the embedded PD target (simulated) or a real deployment, then report.

Default: the chapter's 4×A100 + 4×H20 scenario emulated locally, evenly spaced arrivals at the scenario's
rate for 60 s, run to results/, report to reports/<run_id>/. --target URL measures a real
OpenAI-compatible server instead (the API key is read from the variable named by --api-key-env).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from harness.bench.load_extras import parse_gpu_metrics_url
from harness.bench.pd import BenchPdOptions, bench_pd
from harness.bench.progress import SIMULATED_NOTE, LoadProgress
from harness.bench.rates import parse_rate, run_series, search_rate, summary_lines, table_lines
from harness.cli._output import print_json
from harness.errors import HarnessError
from harness.outdir import writable_dir
from harness.report.bench_pd import twin_lines
from harness.specs.scenario import load_scenario
from harness.store import Run
from workloads.extras_options import add_gpu_arguments, add_profile_arguments
from workloads.headline import headline_lines
from workloads.profiler import parse_profile_window
from workloads.run_extras import RunExtras, extra_lines
from workloads.workload_spec import add_workload_arguments, spec_from_args

# the chapter's scenario, found from any working directory
DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "ch9-hetero-pd.toml"


def _warmup(text: str) -> float | str | None:
    """--warmup-s: 'auto' (the default: measured), a number of seconds, or '' (the Makefile's empty variable: auto)."""
    if text.strip() in ("", "auto"):
        return "auto"
    return _opt_float(text)


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
    a("--rate", type=lambda t: t.strip() or None, default=None, help="arrival rate in requests/s (default: the scenario's arrival_rate_per_s); a list 1,2,4,8 runs "
                                   "a series into one run group; 'auto' searches the highest rate meeting the SLOs (docs/loadgen.md)")
    a("--concurrency", type=int, default=None, help="closed loop: N users, each sending when its previous request ended (instead of --rate)")
    a("--num-requests", type=int, default=None, help="closed loop: the pool of requests (default: enough for the users to keep "
      "sending for --duration-s, from one request's time alone; docs/loadgen.md)")
    a("--schedule", default="constant", choices=["constant", "poisson", "gamma"], help="arrival process (default constant, as the §9.6.1 fluid model; gamma: cv 2, bursty)")
    a("--mix", default="scenario", help="request mix: scenario, reasoning, prefix-6144, short-output, mix-1025-4097, multi-turn, startup-burst")
    a("--workload", default=None, help="replay this workload artifact (.parquet) instead of building one")
    a("--seed", type=int, default=0)
    a("--api", default="chat", choices=["chat", "completions"])
    a("--model-name", default=None, help="model name to send (default: the scenario's model)")
    a("--api-key-env", default=None, help="NAME of the environment variable holding the API key (the key is never stored)")
    a("--workers", type=int, default=0, help="Locust worker processes on this host (0: one local process)")
    a("--remote-workers", type=int, default=0, help="Locust workers on other hosts to wait for (they run `locust -f "
                                                     "workloads/locustfile.py --worker --master-host THIS_HOST --master-port P`)")
    a("--master-bind-host", default="127.0.0.1", help="address the Locust master binds (0.0.0.0 or this host's address for remote workers)")
    a("--master-port", type=int, default=0, help="the Locust master's port (default: a free one; fix it for remote workers)")
    a("--max-concurrency", type=int, default=512, help="cap on requests in flight (a cap, not the pacing)")
    a("--request-timeout-s", type=float, default=120.0)
    a("--time-scale", type=float, default=1.0, help="embedded target: wall seconds per simulated second")
    a("--startup-s", type=float, default=None, help="embedded target: simulated startup (default: the scenario's startup_s)")
    a("--allocation", default="best", help="embedded target: 'best' or a reference allocation of the scenario")
    a("--calibration", default=None, metavar="FILE", help="real target: predict it with its digital twin before the run, the "
      "report's model column then being the twin's prediction (simulated) with errors; FILE: the twin.json of a `harness loop "
      "cpu|gpu` run, or an engine step-time calibration (calibration/<machine>.step-time.json, `make step-time`) with --engine-config")
    a("--engine-config", default=None, metavar="NAME", help="with a step-time --calibration: the llama.cpp engine config the "
      "target runs (TOML or a name in workloads/engines/), whose scheduler the twin runs; no default is assumed")
    a("--proxy", action="store_true", help="with --calibration: predict even with a calibration of another host, kernel family, "
      "thread count, model or scheduler settings (the report says PROXY)")
    a("--warmup-s", type=_warmup, default="auto", help="the window's start: 'auto' (default) where the run's requests in flight "
      "settled after the startup backlog (measured, MSER-5; docs/loadgen.md), or seconds of intended send time")
    a("--cooldown-s", type=float, default=0.0)
    a("--slo-ttft-s", type=float, default=5.0)
    a("--slo-tpot-s", type=float, default=0.05)
    a("--slo-e2e-s", type=float, default=None)
    a("--max-error-fraction", type=float, default=0.5, help="a run where more than this share of requests failed is INVALID (exit 1)")
    a("--no-preflight", action="store_true", help="skip the pre-flight check (GET /v1/models and one short request)")
    a("--slo-attainment", type=float, default=0.9, help="--rate auto: share of requests that must meet every SLO (default 0.9)")
    a("--auto-start", type=float, default=None, help="--rate auto: first rate (default: the scenario's)")
    a("--auto-max-steps", type=int, default=8, help="--rate auto: at most this many runs (default 8)")
    add_gpu_arguments(a, nvml_auto="when the target runs on this host and NVML sees a GPU")
    add_profile_arguments(a, dir_note="; vLLM writes under its VLLM_TORCH_PROFILER_DIR")
    a("--early-stop", action="store_true", help="cut a single run short when it is over-saturated (a rate series and --rate auto "
      "do so by default)")
    a("--no-early-stop", action="store_true", help="a rate series or --rate auto runs every step to its end")

    add_workload_arguments(parser)
    a("--out", default="results", help="results directory (default results/)")
    a("--report-dir", default="reports", help="reports directory (default reports/); '' to skip the report")
    a("--json", action="store_true", help="print the result as JSON")
    a("--quiet", action="store_true", help="no progress display (CI); without a terminal the display is one plain line every 10 s")


def main(args: argparse.Namespace) -> int:
    """Exit 0: a valid run; 1: an invalid run (stored, reasons printed), or a user error; 130: interrupted (what was
    measured is stored). A rate series exits 1 when any of its runs is invalid."""
    rate = parse_rate(args.rate)
    if args.report_dir:  # an unwritable report directory is found before the run, not after it

        writable_dir(args.report_dir, "--report-dir", "report directory")
    opts = BenchPdOptions(
        scenario=args.scenario, target_url=args.target or None, metrics_url=args.metrics_url or None,
        prefill_metrics_url=args.prefill_metrics_url or None, decode_metrics_url=args.decode_metrics_url or None,
        duration_s=60.0 if args.duration_s is None else args.duration_s, rate_per_s=rate if isinstance(rate, float) else None,
        schedule=args.schedule, mix=args.mix, workload_path=args.workload, seed=args.seed, api=args.api, model_name=args.model_name,
        api_key_env=args.api_key_env, workers=args.workers, max_concurrency=args.max_concurrency,
        request_timeout_s=args.request_timeout_s, time_scale=args.time_scale, startup_s=args.startup_s,
        allocation=args.allocation, warmup_s=0.0 if args.warmup_s == "auto" else (args.warmup_s or 0.0),
        warmup_auto=args.warmup_s == "auto", cooldown_s=args.cooldown_s, slo_ttft_s=args.slo_ttft_s,
        slo_tpot_s=args.slo_tpot_s, slo_e2e_s=args.slo_e2e_s, results_dir=args.out, report_dir=args.report_dir or None,
        command_line=list(sys.argv), workload=spec_from_args(args), concurrency=args.concurrency, num_requests=args.num_requests,
        remote_workers=args.remote_workers, master_bind_host=args.master_bind_host, master_port=args.master_port,
        preflight=not args.no_preflight, max_error_fraction=args.max_error_fraction,
        calibration=args.calibration or None, engine_config=args.engine_config or None, proxy=args.proxy,
        **_extra_options(args),
    )
    def progress() -> LoadProgress | None:  # one display per run
        return None if args.quiet or args.json else LoadProgress()

    if isinstance(rate, list) or rate == "auto":
        if opts.concurrency:
            raise HarnessError("--concurrency runs closed loop; a rate series or search needs open loop (drop --concurrency).")

        opts = replace(opts, early_stop=not args.no_early_stop)  # a hopeless step is cut short and marked
        run_one = lambda o: bench_pd(o, progress=progress())  # noqa: E731
        if rate == "auto":
            start = args.auto_start or load_scenario(opts.scenario).workload.arrival_rate_per_s or 1.0
            res = search_rate(opts, run_one, start_per_s=start, slo_attainment=args.slo_attainment, max_steps=args.auto_max_steps)
        else:
            res = run_series(opts, rate, run_one, slo_attainment=args.slo_attainment)
        if args.json:
            print_json(res.to_dict())
        else:
            print("\n".join([*summary_lines(res), *table_lines(res), *(f"report: {p}" for p in res.report_paths)]))
        bad = [p for p in res.points if not p.valid]
        if bad and res.mode == "series":
            print(f"error: {len(bad)} of {len(res.points)} runs are INVALID (rates {', '.join(f'{p.rate_per_s:g}' for p in bad)}); "
                  "their reasons are in the table's runs", file=sys.stderr)
        if not args.json and (opts.target_url is None or any(_simulated_run(p.run_dir) for p in res.points)):
            print(SIMULATED_NOTE)  # the last line: a simulated figure says it is simulated
        return 1 if bad and res.mode == "series" else 0
    res = bench_pd(opts, progress=progress())
    if args.json:
        print_json(res.to_dict())
        return 0 if res.valid else 1
    said = " — SIMULATED: it says so (X-Harness-Simulated: true)" if res.simulated and not res.embedded else ""
    print(f"target: {res.target}{said}")
    print(f"run: {res.run_dir}")
    for p in res.report_paths:
        print(f"report: {p}")
    for line in headline_lines(res.summary, opts.load_mode):
        print(line)

    for line in extra_lines(RunExtras(**res.extras)) if res.extras else []:
        print(line)
    if not res.plan_predicts:
        for line in twin_lines(res.prediction, res.summary):
            print(line)
    if not res.valid:
        print("error: the run is INVALID (it is stored; exit 1): " + "; ".join(res.summary.invalid_reasons), file=sys.stderr)
    if res.simulated:
        print(SIMULATED_NOTE)  # the last line: a simulated figure says it is simulated
    if not res.valid:
        return 1
    return 0


def _simulated_run(run_dir: str) -> bool:
    return bool((Run(run_dir).manifest.engine or {}).get("simulated"))




def _extra_options(args: argparse.Namespace) -> dict:
    """GPU telemetry, profile window and early-stop options (harness.bench.load_extras)."""
    return {"gpu_metrics": [parse_gpu_metrics_url(u) for u in args.gpu_metrics_url or []], "gpu_nvml": args.gpu_nvml,
            "gpu_interval_s": args.gpu_metrics_interval_s, "profile_window": parse_profile_window(args.profile_window),
            "profile_dir": args.profile_dir or None, "early_stop": bool(args.early_stop)}
