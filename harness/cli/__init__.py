"""Thin CLI: one module per verb, each with add_arguments(parser) and main(args) -> int.

Exit codes: 0 ok, 1 user/data error (and an unexpected failure), 2 usage, 3 regression or SLO breach, 4 a comparison
gate the runs cannot decide (its interval reaches past the bound: measure longer).

A HarnessError prints as `error: ...`. Any other exception is a bug (or an input not checked yet): the
terminal gets one line naming the verb, the exception and the log file; the traceback goes to
`error.log` in the run directory the verb was writing, or, when it wrote none, to
$HARNESS_LOG_DIR (default <temp dir>/harness-logs/) as <verb>-<UTC time>-<pid>.log.
HARNESS_TRACEBACK=1 also prints the traceback on the terminal.

Start-up: `harness VERB ...` imports only that verb's module (which imports its use case at module level);
`harness --help` and `--version` import none, reading each verb's help line from its module's source.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import math
import os
import sys
import tempfile
import time
import tokenize
import traceback
from collections.abc import Collection
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import HarnessError
from harness.records import harness_commit
from harness.store import runs_started

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
    "export": "harness.cli.export",
    "predict": "harness.cli.predict",
    "validate": "harness.cli.validate",
}


def version_text() -> str:
    """`harness --version`: the package version and the commit it runs from (as run manifests record them)."""
    commit, dirty = harness_commit()
    where = f"commit {commit[:12]}{' with local changes' if dirty else ''}" if commit else "not a git checkout"
    return f"harness {__version__} ({where}; Python {sys.version.split()[0]})"


class _VersionAction(argparse.Action):
    """--version, its text made only when asked (it runs git)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kw.get("help"))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        print(version_text())
        parser.exit()


def verb_help(modname: str) -> str:
    """The first line of a verb module's docstring, read from its source without importing it (the top-level help
    names every verb; importing them all would make `harness --help` pay for every verb's dependencies)."""
    spec = importlib.util.find_spec(modname)
    if spec is None or spec.origin is None:
        return ""
    with tokenize.open(spec.origin) as f:
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type == tokenize.STRING:
                return (ast.literal_eval(tok.string) or "").strip().splitlines()[0]
            if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
                return ""
    return ""


# the argument list main() is parsing: a verb with subcommands (harness model) imports only the one it names
PARSING_ARGV: ContextVar[list[str] | None] = ContextVar("harness_cli_argv", default=None)


def named_command(argv: list[str], table: Collection[str]) -> str | None:
    """The command an argument list names (its first non-option argument), if it is one of `table`."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in table else None


def chosen_subcommand(verb: str, table: Collection[str]) -> tuple[str, ...] | None:
    """For a verb with subcommands, called from its add_arguments: the subcommands whose modules to import for the
    argument list being parsed (the one it names, or none for its --help); None (all) outside main()."""
    argv = PARSING_ARGV.get()
    if argv is None or verb not in argv:
        return None
    cmd = named_command(argv[argv.index(verb) + 1:], table)
    return () if cmd is None else (cmd,)


def add_commands(sub: argparse._SubParsersAction, table: dict[str, str], chosen: Collection[str] | None, dest: str) -> None:
    """One subparser per command of `table` (name -> module); the modules in `chosen` (all when None) are imported and
    given their flags and their main (as `dest`), the others are listed by name and help line only."""
    for name, modname in table.items():
        if chosen is not None and name not in chosen:
            sub.add_parser(name, help=verb_help(modname))
            continue
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0], description=mod.__doc__)
        mod.add_arguments(p)
        p.set_defaults(**{dest: mod.main})


def build_parser(verbs: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `verbs`, only those verbs' modules are imported and given their flags, the others are
    listed by name and help line only (what `harness --help` and a run of one verb need)."""
    parser = argparse.ArgumentParser(prog="harness", description="Measurement harness for distributed LLM inference.")
    parser.add_argument("--version", action=_VersionAction, help="print the harness version and commit, then exit")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    add_commands(sub, VERBS, verbs, "_main")
    harden_types(parser)
    return parser


def finite_float(text: str) -> float:
    """float(), refusing nan and inf: no flag of the harness means anything by them."""
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text!r} is not a finite number")
    return x


def seed_int(text: str) -> int:
    """int() for a random seed: numpy's generators take integers >= 0."""
    x = int(text)
    if x < 0:
        raise ValueError(f"a seed must be an integer >= 0, got {x}")
    return x


finite_float.__name__ = "finite float"  # argparse names the type in "invalid <type> value: ..."
seed_int.__name__ = "seed (integer >= 0)"


def harden_types(parser: argparse.ArgumentParser) -> None:
    """Every verb's `type=float` flags refuse nan/inf and `--seed` flags refuse negatives, at parse time (exit 2, the
    flag named), so no verb starts a measurement with them; verbs' own converters are left as they are."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                harden_types(sp)
        elif action.type is float:
            action.type = finite_float
        elif action.type is int and action.dest == "seed":
            action.type = seed_int


def crash_log_path(verb: str, runs_before: int) -> Path:
    """Where the traceback of an unexpected failure goes: the newest run directory this verb created, else the log dir."""
    runs = runs_started()[runs_before:]
    if runs and runs[-1].is_dir():
        return runs[-1] / "error.log"
    d = Path(os.environ.get("HARNESS_LOG_DIR") or Path(tempfile.gettempdir()) / "harness-logs")
    return d / f"{verb}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.log"


def report_crash(verb: str, argv: list[str] | None, exc: BaseException, runs_before: int) -> None:
    """One line on stderr naming the verb and the log; the traceback in the log file (not on the terminal)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    head = f"harness {verb} {' '.join(argv if argv is not None else sys.argv[1:])}\n"
    where = crash_log_path(verb, runs_before)
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with open(where, "a", encoding="utf-8") as f:
            f.write(head + text)
        pointer = f"the traceback is in {where}"
    except OSError as err:
        pointer = f"the traceback could not be written to {where} ({err}); rerun with HARNESS_TRACEBACK=1 to see it"
    msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    print(f"error: harness {verb} failed unexpectedly ({type(exc).__name__}{': ' + msg if msg else ''}); this is a bug "
          f"or an input the harness does not check yet: {pointer}. Please report it with that file.", file=sys.stderr)
    if os.environ.get("HARNESS_TRACEBACK") == "1":
        print(text, file=sys.stderr, end="")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verb = named_command(argv, VERBS)
    token = PARSING_ARGV.set(argv)
    try:
        parser = build_parser(() if verb is None else (verb,))
        args = parser.parse_args(argv)
    finally:
        PARSING_ARGV.reset(token)
    runs_before = len(runs_started())
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
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected failure becomes a line and a log
        report_crash(args.verb, argv, exc, runs_before)
        return 1
