"""KV tiers of a scenario: fetch per tier, retention, keep/fetch/recompute, prefetch, SSD budget, pages, eviction (§9.5.2–9.5.3, §9.7.1)."""

from __future__ import annotations

import argparse

from harness.cli.model._common import add_scenario_arguments, print_result
from harness.model.kv_plan import kv_tiers_plan
from harness.report.plans.kv import render_text
from harness.specs.scenario_kv import load_kind


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, 'scenario TOML file of kind "kv-tiers" (e.g. workloads/scenarios/ch9-kv-tiers.toml)', "docs/model-kv.md")


def main(args: argparse.Namespace) -> int:
    return print_result(args, kv_tiers_plan(load_kind(args.scenario, "kv-tiers")), render_text)
