"""Skew under large EP: rows per card, random-routing imbalance, dispatch/combine bounds, overlap (§9.4.1, §9.4.3)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result, section_overrides
from harness.model.expert_plans import ep_skew_plan
from harness.report.plans.ep_skew import render_text
from harness.specs.scenario_experts import EpSkewScenario, load_expert_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, "scenario TOML of kind ep-skew (e.g. workloads/scenarios/ch9-ex9.5-ep-skew.toml)", "docs/model-experts.md")
    parser.add_argument("--batches", type=int, metavar="N", help="simulated batches (replaces routing.batches)")
    parser.add_argument("--seed", type=int, metavar="S", help="random seed of the routing simulation (replaces routing.seed)")


def main(args: argparse.Namespace) -> int:
    overrides = section_overrides(args, "routing", {"batches": "batches", "seed": "seed"})
    return print_result(args, ep_skew_plan(load_expert_scenario(args.scenario, EpSkewScenario, overrides)), render_text)
