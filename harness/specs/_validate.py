"""Shared checks for spec fields: each failure names the field, the value and the fix."""

from __future__ import annotations

import math

from harness.errors import HarnessError


def positive(owner: str, field: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise HarnessError(f"{owner}: {field} must be a positive finite number, got {value!r}.")


def non_negative(owner: str, field: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise HarnessError(f"{owner}: {field} must be a finite number >= 0, got {value!r}.")


def positive_int(owner: str, field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise HarnessError(f"{owner}: {field} must be a positive integer, got {value!r}.")


def non_negative_int(owner: str, field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HarnessError(f"{owner}: {field} must be an integer >= 0, got {value!r}.")


def unknown(kind: str, name: str, known: list[str], fix: str = "") -> HarnessError:
    msg = f"No {kind} {name!r}. Known: {', '.join(sorted(known))}."
    if fix:
        msg += f" {fix}"
    return HarnessError(msg)
