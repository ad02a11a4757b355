"""Cache-aware routing of a scenario: T_first per path, tie bandwidths, uncertain hits, link load (§9.5.4, example 9.7)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result
from harness.model.kv_plan import routing_plan
from harness.report.plans.route import render_text
from harness.specs.scenario_kv import load_kind


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, 'scenario TOML file of kind "cache-routing" (e.g. workloads/scenarios/ch9-ex9.7-cache-routing.toml)',
                           "docs/model-kv.md")


def main(args: argparse.Namespace) -> int:
    return print_result(args, routing_plan(load_kind(args.scenario, "cache-routing")), render_text)
