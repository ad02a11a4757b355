"""Fit the model's constants from one machine's micro runs into calibration/<machine>.json."""

from __future__ import annotations

import argparse

from harness.cli._output import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="results/<machine>/, one run directory, or results/ when it holds one machine's micro runs")
    parser.add_argument("--out", metavar="FILE", help="calibration file to write, or a directory for <dir>/<machine>.json (default calibration/<machine>.json)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap resamples per constant (default 200)")
    parser.add_argument("--proxy", action="append", metavar="TARGET=MEASURED",
                        help="let a measured device or link stand for a catalog GPU or link the model plans for "
                             "(e.g. a100-80gb-sxm=cpu, nic-200g=pcie:h2d); repeatable")
    parser.add_argument("--json", action="store_true", help="print the whole calibration record as JSON")


def main(args: argparse.Namespace) -> int:
    from harness.calibration.calibrate import calibrate, parse_proxy

    rec, path = calibrate(args.results, args.out, args.seed, args.bootstrap, parse_proxy(args.proxy))
    if args.json:
        print_json(rec.to_dict())
    else:
        print(render_summary(rec, str(path)))
    return 0


def _iv(e, scale: float = 1.0, fmt: str = ".3g") -> str:
    return f"{e.value * scale:{fmt}} [{e.low * scale:{fmt}}, {e.high * scale:{fmt}}]"


def render_summary(rec, path: str) -> str:
    lines = [f"Calibration of {rec.machine}: {len(rec.runs)} run(s), {rec.n_bootstrap} bootstrap resamples (seed {rec.seed})",
             f"  written to {path}"]
    for c in rec.curves:
        pts = ", ".join(f"{p.x:g}: {p.fitted:.1%}" for p in c.points)
        lines.append(f"  {c.quantity} on {c.device} ({c.dtype}, {c.backend}) vs {c.x_name}: {pts}")
    for lf in rec.links:
        lines.append(f"  link {lf.key}: α = {_iv(lf.alpha_s, 1e6)} µs, β = {_iv(lf.bandwidth_bytes_per_s, 1e-9)} GB/s")
    if rec.cpu_expert_flops_per_s:
        lines.append(f"  C_C (CPU expert) = {_iv(rec.cpu_expert_flops_per_s, 1e-12)} TFLOP/s")
    if rec.host_memory_bandwidth_bytes_per_s:
        lines.append(f"  B_D (host memory) = {_iv(rec.host_memory_bandwidth_bytes_per_s, 1e-9)} GB/s")
    for op, e in rec.storage.items():
        lines.append(f"  storage {op} = {_iv(e, 1e-9)} GB/s")
    for s in rec.stages:
        unit = "new tokens/s" if s.phase == "prefill" else "decode calls/s"
        lines.append(f"  measured {'r_P' if s.phase == 'prefill' else 'r_D'} on {s.device} ({s.model}) = {_iv(s.rate)} {unit}")
    for target, measured in rec.proxy.items():
        lines.append(f"  proxy: {target} uses what was measured on {measured}")
    for w in rec.warnings:
        lines.append(f"  warning: {w}")
    lines.append("  intervals: 95% bootstrap over the raw samples")
    return "\n".join(lines)
