"""Instance lifecycle of a scenario: graph-capture break-even, migration catch-up, reconfiguration, recovery (§9.6)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result
from harness.model.kv_plan import lifecycle_plan
from harness.report.plans.lifecycle import render_text
from harness.specs.scenario_kv import load_kind


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, 'scenario TOML file of kind "lifecycle" (e.g. workloads/scenarios/ch9-lifecycle.toml)', "docs/model-kv.md")


def main(args: argparse.Namespace) -> int:
    return print_result(args, lifecycle_plan(load_kind(args.scenario, "lifecycle")), render_text)
