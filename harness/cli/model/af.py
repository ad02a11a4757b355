"""Attention/FFN split: per-layer AF transfers vs one PD transfer, α*, the micro-batch pipeline (§9.3.4)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result, section_overrides
from harness.model.expert_plans import af_plan
from harness.report.plans.af import render_text
from harness.specs.scenario_experts import AfSplitScenario, load_expert_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, "scenario TOML of kind af-split (e.g. workloads/scenarios/ch9-ex9.4-af.toml)", "docs/model-experts.md")
    parser.add_argument("--bandwidth-bytes-per-s", type=float, nargs="+", metavar="B",
                        help="link bandwidths to evaluate (replaces af.bandwidths_bytes_per_s)")
    parser.add_argument("--startup-latency-s", type=float, metavar="S", help="per-transfer launch cost (replaces af.startup_latency_s)")


def main(args: argparse.Namespace) -> int:
    overrides = section_overrides(args, "af", {"bandwidth_bytes_per_s": "bandwidths_bytes_per_s",
                                               "startup_latency_s": "startup_latency_s"})
    return print_result(args, af_plan(load_expert_scenario(args.scenario, AfSplitScenario, overrides)), render_text)
