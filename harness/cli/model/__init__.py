"""Run the analytical model of Chapter 9 on a scenario (plan, and per-section calculators)."""

from __future__ import annotations

import argparse

from harness.cli import add_commands, chosen_subcommand

# subcommand -> module under harness.cli.model; add one line per subcommand
SUBCOMMANDS: dict[str, str] = {
    "plan": "harness.cli.model.plan",
    "list": "harness.cli.model.list_scenarios",
    "experts": "harness.cli.model.experts",
    "af": "harness.cli.model.af",
    "ep-skew": "harness.cli.model.ep_skew",
    "replicas": "harness.cli.model.replicas",
    "kv-tiers": "harness.cli.model.kv",
    "route": "harness.cli.model.route",
    "lifecycle": "harness.cli.model.lifecycle",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_cmd", metavar="SUBCOMMAND")
    sub.required = True
    add_commands(sub, SUBCOMMANDS, chosen_subcommand("model", SUBCOMMANDS), "_model_main")


def main(args: argparse.Namespace) -> int:
    return args._model_main(args)
