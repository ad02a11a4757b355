"""Text summary of one calibration record (`harness calibrate`): fitted curves, links, host constants, stages,
proxies and warnings, each constant with its 95 % bootstrap interval."""

from __future__ import annotations

from typing import Any


def _iv(e, scale: float = 1.0, fmt: str = ".3g") -> str:
    return f"{e.value * scale:{fmt}} [{e.low * scale:{fmt}}, {e.high * scale:{fmt}}]"


def render_summary(rec: Any, path: str) -> str:
    """`rec`: a harness.calibration.record.CalibrationRecord; `path`: where it was written."""
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
