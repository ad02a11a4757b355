"""List the spec catalog: GPUs, links and models, each number with its source."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from harness.cli._output import print_json
from harness.specs import GPUS, LINKS, MODELS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", choices=["gpus", "links", "models", "all"], default="all")
    parser.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    cats = {"gpus": GPUS, "links": LINKS, "models": MODELS}
    chosen = cats if args.kind == "all" else {args.kind: cats[args.kind]}
    if args.json:
        print_json({k: {n: asdict(v) for n, v in c.items()} for k, c in chosen.items()})
        return 0
    for kind, cat in chosen.items():
        print(f"{kind}:")
        for name, spec in cat.items():
            if kind == "gpus":
                line = f"{spec.peak_bf16_flops_per_s / 1e12:8.1f} TFLOP/s bf16  {spec.hbm_bandwidth_bytes_per_s / 1e9:6.0f} GB/s  {spec.hbm_capacity_bytes / 1e9:5.0f} GB"
            elif kind == "links":
                line = f"{spec.bandwidth_bytes_per_s / 1e9:7.2f} GB/s  α={spec.startup_latency_s * 1e6:g} µs"
            else:
                line = f"{spec.n_layers} layers, {spec.attention}, {'MoE ' + str(spec.n_routed_experts) + ' experts' if spec.is_moe else 'dense'}"
            print(f"  {name:18s} {line}")
            print(f"  {'':18s} source: {spec.source}")
    return 0
