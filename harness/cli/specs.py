"""List the spec catalog: GPUs, CPUs, links, SSDs and models, each number with its source."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from harness.cli._output import print_json
from harness.specs import CPUS, GPUS, LINKS, MODELS, SSDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", choices=["gpus", "cpus", "links", "ssds", "models", "all"], default="all")
    parser.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    cats = {"gpus": GPUS, "cpus": CPUS, "links": LINKS, "ssds": SSDS, "models": MODELS}
    chosen = cats if args.kind == "all" else {args.kind: cats[args.kind]}
    if args.json:
        print_json({k: {n: asdict(v) for n, v in c.items()} for k, c in chosen.items()})
        return 0
    for kind, cat in chosen.items():
        print(f"{kind}:")
        for name, spec in cat.items():
            if kind == "gpus":
                line = f"{spec.peak_bf16_flops_per_s / 1e12:8.1f} TFLOP/s bf16  {spec.hbm_bandwidth_bytes_per_s / 1e9:6.0f} GB/s  {spec.hbm_capacity_bytes / 1e9:5.0f} GB"
            elif kind == "cpus":
                line = (f"{spec.avx512_flops_per_s / 1e12:5.1f} / {spec.amx_flops_per_s / 1e12:5.1f} TFLOP/s AVX-512 / AMX  "
                        f"{spec.local_dram_bandwidth_bytes_per_s / 1e9:5.0f} / {spec.remote_dram_bandwidth_bytes_per_s / 1e9:4.0f} GB/s local / remote")
            elif kind == "ssds":
                line = (f"{spec.seq_read_bytes_per_s / 1e9:4.1f} / {spec.seq_write_bytes_per_s / 1e9:4.1f} GB/s read / write  "
                        f"{spec.capacity_bytes / 1e12:5.2f} TB  {spec.drive_writes_per_day:g} DWPD")
            elif kind == "links":
                line = f"{spec.bandwidth_bytes_per_s / 1e9:7.2f} GB/s  α={spec.startup_latency_s * 1e6:g} µs"
            else:
                line = f"{spec.n_layers} layers, {spec.attention}, {'MoE ' + str(spec.n_routed_experts) + ' experts' if spec.is_moe else 'dense'}"
            print(f"  {name:18s} {line}")
            print(f"  {'':18s} source: {spec.source}")
    return 0
