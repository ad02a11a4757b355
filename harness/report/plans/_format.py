"""Formatting shared by the plan summaries."""

from __future__ import annotations

from harness.units import fmt_ms


def ms_or_na(x: float | None) -> str:
    return fmt_ms(x, missing="n/a")
