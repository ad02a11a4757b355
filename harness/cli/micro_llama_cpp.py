"""Run llama.cpp's own benchmarks (llama-batched-bench, llama-bench, test-backend-ops MUL_MAT) on a GGUF and store them.

  harness micro-llama-cpp --config llama-cpp-gemma3-270m --out results/      the engine config's model and settings
  harness micro-llama-cpp --model PATH.gguf --threads 2 --quick --out results/
  harness micro-llama-cpp --tools batched,bench ...                          a subset of the tools

One micro run per call (results/<machine>/<run_id>/, tables micro_cases / micro_samples), with the
tools' version and command lines in the manifest; `harness step-time fit` reads it. Method:
microbench/llama_cpp/ and docs/model.md "Calibrated step time".
"""

from __future__ import annotations

import argparse
import os
import sys

from harness.cli._output import print_json
from harness.engines.config import load_engine_config
from harness.engines.llama_cpp import resolve_model
from harness.errors import HarnessError
from microbench.llama_cpp.run import parse_tools, run_llama_cpp_micro


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", help="llama.cpp engine config whose model, threads, batch sizes, flash-attn and repack to use "
                                         "(default llama-cpp-gemma3-270m, whose flags `harness loop cpu --model` also runs)")
    parser.add_argument("--model", metavar="PATH.gguf", help="GGUF model (overrides the config's; the config's flags stay)")
    parser.add_argument("--threads", type=int, help="threads (default: the config's, else the CPU count)")
    parser.add_argument("--repack", action=argparse.BooleanOptionalAction, default=None,
                        help="llama.cpp weight repacking (default: the config's)")
    parser.add_argument("--tools", default="all", help="comma-separated: batched, bench, ops, or all (default)")
    parser.add_argument("--quick", action="store_true", help="a shorter sweep (still enough points for the step-time fit)")
    parser.add_argument("--out", default="results", help="results directory (default results/)")
    parser.add_argument("--json", action="store_true", help="print the run summary as JSON")


def main(args: argparse.Namespace) -> int:
    which = parse_tools(args.tools)
    threads = args.threads
    model = args.model
    # always a config's flags, also with only --model: the kernels calibrated must be the ones the engine runs, and
    # `harness loop cpu --model` runs any GGUF on the default config's flags (until 2026-12-03 night --model alone took
    # llama.cpp's defaults: repacking on, which picks other kernels, and on the Intel Xeon VM died of SIGILL on Q8_0)
    cfg = load_engine_config(args.config or "llama-cpp-gemma3-270m")
    if cfg.engine != "llama.cpp":
        raise HarnessError(f"--config {cfg.name!r} is for {cfg.engine!r}; give a llama.cpp engine config.")
    o = cfg.options
    model = model or str(resolve_model(cfg))
    threads = threads or o.threads
    kw = {"n_batch": o.batch_size, "n_ubatch": o.ubatch_size, "flash_attn": o.flash_attn, "repack": o.repack}
    threads = threads or (os.cpu_count() or 1)
    if args.repack is not None:
        kw["repack"] = args.repack
    res = run_llama_cpp_micro(model, threads=threads, out=args.out, quick=args.quick, which=which,
                              progress=lambda s: print(f"  {s}", file=sys.stderr), command_line=sys.argv, **kw)
    if args.json:
        print_json(res.to_dict())
    else:
        print(f"llama.cpp micro run {res.run_id}: {res.cases} cases -> {res.path}")
        for r in res.tool_runs:
            share = "—" if r["cpu_share"] is None else f"{r['cpu_share']:.0%}"
            print(f"  {r['tool']}: {r['wall_s']:.1f} s, CPU share {share}{' (contended)' if r['contended'] else ''}")
        for s in res.skips:
            print(f"  skipped {s['suite']}: {s['reason']}")
        for n in res.notes:
            print(f"  note: {n}")
    return 0
