"""Served-load records shared by every predicted-against-measured path: percentiles and the one error convention.

`Percentiles` is the summary of one latency (or lag) distribution: count, mean, p50, p90, p99, max, in the
quantity's base unit (seconds for latencies). It replaces the `{"count", "mean", "p50", ...}` dicts; `to_dict`
writes exactly that dict, so stored documents keep their shape, and `from_dict` reads it back.

The error convention, everywhere a prediction meets a measurement: `relative_error(predicted, measured)` =
(predicted − measured) / measured, signed, stored as a fraction; `fmt_error_pct` shows it as a percentage (harness.units.fmt_pct).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from harness.errors import HarnessError
from harness.units import fmt_pct

PERCENTILE_FIELDS = ("count", "mean", "p50", "p90", "p99", "max")


@dataclass(frozen=True, slots=True)
class Percentiles:
    """One distribution's summary; every statistic is None when no value was finite (count 0)."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise HarnessError(f"Percentiles.count must be an integer >= 0, got {self.count!r}")
        for name in PERCENTILE_FIELDS[1:]:
            v = getattr(self, name)
            if v is not None and not isinstance(v, (int, float)):
                raise HarnessError(f"Percentiles.{name} must be a number or None, got {v!r}")

    @classmethod
    def from_values(cls, values: Iterable[Any]) -> "Percentiles":
        """Percentiles of the finite values (None and NaN are skipped); numpy's linear interpolation."""
        import numpy as np

        a = np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)
        if a.size == 0:
            return cls()
        p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
        return cls(int(a.size), float(a.mean()), p50, p90, p99, float(a.max()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | "Percentiles" | None, *, source: str = "percentiles") -> "Percentiles":
        """The record from its stored dict (missing statistics read as None); None reads as an empty distribution."""
        if data is None:
            return cls()
        if isinstance(data, Percentiles):
            return data
        if not isinstance(data, Mapping):
            raise HarnessError(f"{source}: expected a mapping of {', '.join(PERCENTILE_FIELDS)}, got {type(data).__name__}")
        count = data.get("count", 0)
        try:
            count = int(count or 0)
        except (TypeError, ValueError):
            raise HarnessError(f"{source}: count must be an integer, got {count!r}") from None
        vals = {}
        for name in PERCENTILE_FIELDS[1:]:
            v = data.get(name)
            try:
                vals[name] = None if v is None else float(v)
            except (TypeError, ValueError):
                raise HarnessError(f"{source}: {name} must be a number or null, got {v!r}") from None
        return cls(count, **vals)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def get(self, name: str) -> float | int | None:
        """The statistic called `name` (one of PERCENTILE_FIELDS); for code that picks it from a user's choice."""
        if name not in PERCENTILE_FIELDS:
            raise HarnessError(f"no statistic {name!r} in Percentiles; known: {', '.join(PERCENTILE_FIELDS)}")
        return getattr(self, name)

    @property
    def empty(self) -> bool:
        return self.count == 0


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    """(predicted − measured) / measured as a signed fraction; None when either is missing or not finite, or the
    measurement is 0 (no relative error exists then)."""
    if predicted is None or measured is None:
        return None
    p, m = float(predicted), float(measured)
    if not (math.isfinite(p) and math.isfinite(m)) or m == 0:
        return None
    return (p - m) / m


def fmt_error_pct(error: float | None, *, digits: int = 1) -> str:
    """A relative error (fraction) as a signed percentage ("+12.3%"), '—' when there is none."""
    return fmt_pct(error, digits, missing="—", sign=True)


__all__ = ["PERCENTILE_FIELDS", "Percentiles", "fmt_error_pct", "relative_error"]
