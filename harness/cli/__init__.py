"""Thin CLI: one module per verb, each with add_arguments(parser) and main(args) -> int.

Exit codes: 0 ok, 1 user/data error, 2 usage, 3 regression or SLO breach.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import HarnessError

# verb -> module under harness.cli; add one line per verb
VERBS: dict[str, str] = {
    "model": "harness.cli.model",
    "specs": "harness.cli.specs",
    "calibrate": "harness.cli.calibrate",
    "report": "harness.cli.report",
    "engine": "harness.cli.engine",
    "loop": "harness.cli.loop",
    "micro": "harness.cli.micro",
    "bench-pd": "harness.cli.bench",
    "compare": "harness.cli.compare",
    "nightly": "harness.cli.nightly",
    "compare-engines": "harness.cli.compare_engines",
    "sweep": "harness.cli.sweep",
    "micro-llama-cpp": "harness.cli.micro_llama_cpp",
    "step-time": "harness.cli.step_time",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Measurement harness for distributed LLM inference.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb, modname in VERBS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(verb, help=(mod.__doc__ or "").strip().splitlines()[0], description=mod.__doc__)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._main(args) or 0)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
