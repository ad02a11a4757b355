"""Hot-expert replicas: saving per batch, copy cost, payback, memory budget, pool stability (§9.4.2)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result, section_overrides
from harness.model.expert_plans import replicas_plan
from harness.report.plans.replicas import render_text
from harness.specs.scenario_experts import ExpertReplicasScenario, load_expert_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, "scenario TOML of kind expert-replicas (e.g. workloads/scenarios/ch9-ex9.6-replicas.toml)",
                           "docs/model-experts.md")
    parser.add_argument("--replicas", type=int, metavar="N", help="experts to replicate (replaces hot.replicas)")
    parser.add_argument("--free-bytes-per-receiver", type=float, metavar="BYTES",
                        help="free HBM on each receiving card (replaces hot.free_bytes_per_receiver)")


def main(args: argparse.Namespace) -> int:
    overrides = section_overrides(args, "hot", {"replicas": "replicas", "free_bytes_per_receiver": "free_bytes_per_receiver"})
    return print_result(args, replicas_plan(load_expert_scenario(args.scenario, ExpertReplicasScenario, overrides)), render_text)
