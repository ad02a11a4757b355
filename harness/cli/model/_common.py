"""What the `harness model` calculators share: the scenario and --json arguments, flag overrides, the output."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from harness.cli._output import print_json
from harness.model.record import as_json


def add_scenario_arguments(parser: argparse.ArgumentParser, scenario_help: str, fields_doc: str) -> None:
    """The positional scenario file and --json, whose fields `fields_doc` documents."""
    parser.add_argument("scenario", help=scenario_help)
    parser.add_argument("--json", action="store_true", help=f"print every field as JSON (documented in {fields_doc})")


def section_overrides(args: argparse.Namespace, section: str, fields: dict[str, str]) -> dict[str, Any] | None:
    """`{section: {field: value}}` for the flags given (`fields` maps each flag's dest to its field); None when none is."""
    given = {field: getattr(args, dest) for dest, field in fields.items() if getattr(args, dest) is not None}
    return {section: given} if given else None


def print_result(args: argparse.Namespace, result: Any, render: Callable[[Any], str]) -> int:
    """Print `result` (a model record, or a plain dict) as JSON with --json, else its text summary; the exit status."""
    if args.json:
        print_json(as_json(result))
    else:
        print(render(result))
    return 0

