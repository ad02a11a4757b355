"""List the scenario files shipped in workloads/scenarios/."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.specs.scenario import load_any_scenario

SCENARIO_DIR = Path(__file__).resolve().parents[3] / "workloads" / "scenarios"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=str(SCENARIO_DIR), help="folder of scenario files (default: %(default)s)")


def main(args: argparse.Namespace) -> int:
    for p in sorted(Path(args.dir).glob("*.toml")):
        s = load_any_scenario(p)
        print(f"{p.name:34s} {getattr(s, 'kind', '?'):18s} {getattr(s, 'source', '')}")
    return 0
