"""CPU vs GPU expert execution, crossovers, balance points, expert capacity and reuse (§9.3.2–9.3.3)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result, section_overrides
from harness.model.expert_plans import experts_plan
from harness.report.plans.experts import render_text
from harness.specs.scenario_experts import ExpertsCpuGpuScenario, load_expert_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, "scenario TOML of kind experts-cpu-gpu (e.g. workloads/scenarios/ch9-ex9.3-cpu-gpu-experts.toml)",
                           "docs/model-experts.md")
    parser.add_argument("--tokens-per-expert", type=int, nargs="+", metavar="M",
                        help="token counts per expert, one case each (replaces batch.tokens_per_expert)")
    parser.add_argument("--experts", type=int, metavar="N", help="experts the batch runs (replaces batch.experts)")


def main(args: argparse.Namespace) -> int:
    overrides = section_overrides(args, "batch", {"tokens_per_expert": "tokens_per_expert", "experts": "experts"})
    return print_result(args, experts_plan(load_expert_scenario(args.scenario, ExpertsCpuGpuScenario, overrides)), render_text)
