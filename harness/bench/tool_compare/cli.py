"""Flags of `python -m harness.bench.tool_compare`, checked (every bad value names its flag and the fix), and `main`."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import harness.bench.tool_compare as _package
from harness.bench.tool_compare.adapters import ADAPTERS, TOOLS, Tools, Workload
from harness.bench.tool_compare.run import LIGHT_TTFT_S, one_run
from harness.bench.tool_compare.stats import summarise
from harness.bench.tool_compare.tokenizer import write_word_tokenizer
from harness.errors import HarnessError
from harness.records import cpu_model

package_doc = _package.__doc__


def _positive(flag: str, value: float, *, integer: bool = False, low: float = 0.0) -> None:
    if integer and (isinstance(value, bool) or int(value) != value):
        raise HarnessError(f"{flag} must be a whole number, got {value!r}; give e.g. {flag} 4.")
    if not value > low:
        raise HarnessError(f"{flag} must be > {low:g}, got {value!r}; give a positive value.")


def _executable(flag: str, value: str | None) -> str | None:
    if value is None:
        return None
    p = Path(value)
    if not p.is_file() or not os.access(p, os.X_OK):
        raise HarnessError(f"{flag} {value!r} is not an executable file; give the tool's entry point in its virtualenv, "
                           f"e.g. {flag} /work/peers/{flag.lstrip('-')}/bin/{flag.lstrip('-')}.")
    return str(p.resolve())


# per mode, the defaults of the flags left out (None); --mode light is issue 17's light-load TTFT comparison
MODE_DEFAULTS = {
    "throughput": {"requests": 256, "input_tokens": 128, "output_tokens": 4096, "concurrency": 32, "server": "target",
                   "server_itl_s": 0.001, "rate_per_s": None},
    "light": {"requests": 300, "input_tokens": 64, "output_tokens": 50, "concurrency": 32, "server": "token",
              "server_itl_s": 0.02, "rate_per_s": 2.0},
}


def _mode_defaults(args: argparse.Namespace) -> None:
    mode = getattr(args, "mode", "throughput")
    if mode == "light" and args.server == "target":
        raise HarnessError("--mode light compares TTFT with the token server's emit log; drop --server target "
                           "(light implies --server token).")
    if mode == "light" and args.concurrency is not None:
        raise HarnessError("--concurrency does not apply to --mode light (open loop at --rate-per-s); drop it or give "
                           "--rate-per-s.")
    if mode == "throughput" and args.rate_per_s is not None:
        raise HarnessError("--rate-per-s applies to --mode light only; add --mode light or drop it.")
    given_itl = args.server_itl_s is not None
    for k, v in MODE_DEFAULTS[mode].items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    args.server_itl_given = given_itl


def validate(args: argparse.Namespace) -> tuple[list[str], Workload, Tools]:
    _mode_defaults(args)
    _positive("--rounds", args.rounds, integer=True)
    _positive("--requests", args.requests, integer=True)
    _positive("--input-tokens", args.input_tokens, integer=True)
    _positive("--output-tokens", args.output_tokens, integer=True)
    _positive("--concurrency", args.concurrency, integer=True)
    _positive("--sample-interval-s", args.sample_interval_s)
    if args.sample_interval_s > 5.0:
        raise HarnessError(f"--sample-interval-s must be at most 5 s (the load lasts a few seconds), got {args.sample_interval_s!r}; "
                           "give about 0.1.")
    _positive("--run-timeout-s", args.run_timeout_s)
    if not 0.0 <= args.server_itl_s <= 1.0:
        raise HarnessError(f"--server-itl-s is the token server's cadence in seconds, from 0 to 1; got {args.server_itl_s!r}.")
    n_cpu = os.cpu_count() or 1
    if args.server_cpu is not None and not 0 <= args.server_cpu < n_cpu:
        raise HarnessError(f"--server-cpu must be a core number from 0 to {n_cpu - 1}; got {args.server_cpu!r}.")
    if args.rate_per_s is not None:
        _positive("--rate-per-s", args.rate_per_s)
    if args.server != "token" and (args.server_cpu is not None or args.server_itl_given):
        raise HarnessError("--server-itl-s and --server-cpu apply to --server token only; add --server token or drop them.")
    _positive("--max-loadavg", args.max_loadavg)
    _positive("--max-busy-pct", args.max_busy_pct)
    if args.max_busy_pct > 100:
        raise HarnessError(f"--max-busy-pct is a percentage of all CPUs, at most 100, got {args.max_busy_pct!r}; give e.g. 15.")
    if args.quiet_timeout_s < 0:
        raise HarnessError(f"--quiet-timeout-s must be >= 0, got {args.quiet_timeout_s!r}; give 0 to start at once.")
    tools = Tools(guidellm=_executable("--guidellm", args.guidellm), aiperf=_executable("--aiperf", args.aiperf))
    given = {t: ADAPTERS[t].given(tools) for t in TOOLS}
    if args.tools is None:
        chosen = [t for t in TOOLS if given[t]]
    else:
        chosen = [x.strip() for x in args.tools.split(",") if x.strip()]
        bad = [x for x in chosen if x not in TOOLS]
        if bad or not chosen:
            raise HarnessError(f"--tools takes a comma-separated subset of {','.join(TOOLS)}, got {args.tools!r}.")
        missing = [x for x in chosen if not given[x]]
        if missing:
            raise HarnessError(f"--tools names {','.join(missing)} but no executable was given; add "
                               + " ".join(f"--{m} PATH" for m in missing) + ".")
        chosen = [t for t in TOOLS if t in chosen]  # the round-robin order is fixed
    if any(ADAPTERS[t].needs_tokenizer for t in chosen):
        if args.tokenizer is None:  # the word-level tokenizer of the target's own token count, built here
            args.tokenizer = str(write_word_tokenizer(Path(args.work_dir or tempfile.mkdtemp(prefix="tool-compare-")) / "tokenizer"))
        if not (Path(args.tokenizer) / "tokenizer.json").is_file():
            raise HarnessError(f"--tokenizer {args.tokenizer!r} has no tokenizer.json; give the directory that save_pretrained wrote.")
        tools.tokenizer = str(Path(args.tokenizer).resolve())
    if args.out is not None and not Path(args.out).resolve().parent.is_dir():
        raise HarnessError(f"--out {args.out!r}: its directory does not exist; create it or give another path.")
    if args.work_dir is not None and Path(args.work_dir).exists() and not Path(args.work_dir).is_dir():
        raise HarnessError(f"--work-dir {args.work_dir!r} exists and is not a directory; give a directory.")
    wl = Workload(int(args.requests), int(args.input_tokens), int(args.output_tokens), int(args.concurrency),
                  None if args.rate_per_s is None else float(args.rate_per_s))
    return chosen, wl, tools


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.bench.tool_compare", description=package_doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--guidellm", help="path of the guidellm executable (e.g. /work/peers/guidellm/bin/guidellm); not given: skipped")
    p.add_argument("--aiperf", help="path of the aiperf executable (e.g. /work/peers/aiperf/bin/aiperf); not given: skipped")
    p.add_argument("--tokenizer", help="local directory with tokenizer.json for guidellm / AIPerf (nothing is downloaded); "
                                       "default: a word-level one written to the work directory")
    p.add_argument("--tools", default=None, help="comma-separated subset of ours,guidellm,aiperf (default: ours and every tool given)")
    p.add_argument("--rounds", type=int, default=1, help="rounds; each runs every tool once, in the order ours, guidellm, aiperf")
    p.add_argument("--requests", type=int, default=None, help="default 256; --mode light: 300")
    p.add_argument("--input-tokens", type=int, default=None, help="default 128; --mode light: 64")
    p.add_argument("--output-tokens", type=int, default=None, help="default 4096; --mode light: 50")
    p.add_argument("--concurrency", type=int, default=None, help="default 32; not with --mode light (open loop)")
    p.add_argument("--sample-interval-s", type=float, default=0.1)
    p.add_argument("--run-timeout-s", type=float, default=600.0, help="a command running longer is stopped")
    p.add_argument("--max-loadavg", type=float, default=1.0, help="wait before each run until the 1-minute load average is below this")
    p.add_argument("--max-busy-pct", type=float, default=15.0, help="... and the CPUs were less busy than this over 3 s")
    p.add_argument("--quiet-timeout-s", type=float, default=120.0, help="wait at most this long for a quiet machine (recorded)")
    p.add_argument("--mode", choices=list(MODE_DEFAULTS), default="throughput",
                   help="'throughput': client CPU per streamed token (the default); 'light': light-load TTFT, each tool's "
                        "client TTFT minus the token server's own TTFT (2 req/s constant, 300 requests x 50 tokens, server "
                        "TTFT 100 ms and ITL 20 ms, emit log on; docs/loadgen-speed.md)")
    p.add_argument("--rate-per-s", type=float, default=None, help="--mode light: the constant request rate (default 2)")
    p.add_argument("--server", choices=["target", "token"], default=None,
                   help="'target': the embedded fixed-timing target, each stream written whole (the figures of 2026-11-30); "
                        "'token': the independent one-token-per-write server (harness.bench.token_server), one send per token")
    p.add_argument("--server-itl-s", type=float, default=None,
                   help="--server token: the token cadence in seconds (default 0.001, --mode light 0.02; 0: as fast as "
                        "the server writes)")
    p.add_argument("--server-cpu", type=int, default=None, help="--server token: pin the server to this core (recorded)")
    p.add_argument("--work-dir", default=None, help="where runs keep their logs and samples (default: a new /tmp directory)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    """python -m harness.bench.tool_compare: exit 0 with the summary as JSON, 1 on a bad flag (named)."""
    args = parser().parse_args(argv)
    try:
        chosen, wl, tools = validate(args)
        work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="tool-compare-"))
        work_dir.mkdir(parents=True, exist_ok=True)
        res: dict[str, Any] = {
            "host": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                     "kernel": platform.release()},
            "mode": args.mode,
            "workload": {**asdict(wl), "tokens": wl.tokens, "api": "/v1/completions", "streaming": True,
                         "target": ("harness.target --profile fixed --ttft-s 0 --itl-s 0 (each stream written whole)"
                                    if args.server == "target" else
                                    f"harness.bench.token_server --ttft-s {LIGHT_TTFT_S if args.mode == 'light' else 0:g} "
                                    f"--itl-s {args.server_itl_s:g} (one send per token)"
                                    + (f" --cpu {args.server_cpu}" if args.server_cpu is not None else "")),
                         "server": args.server},
            "tools": chosen, "work_dir": str(work_dir), "runs": []}
        for rnd in range(1, args.rounds + 1):
            for tool in chosen:
                res["runs"].append(one_run(tool, rnd, wl, tools, work_dir, args))
                res["summary"] = summarise(res["runs"])
                if args.out:  # after every run, so an interrupted series keeps what it measured
                    Path(args.out).write_text(json.dumps(res, indent=2))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(res["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
