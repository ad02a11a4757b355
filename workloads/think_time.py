"""Think times between the turns of a session (`--pause-s`): a fixed number of seconds or a seeded distribution.

Written as `2` (fixed), `exponential:mean=2`, `uniform:min=1,max=5` or `lognormal:mean=2,stdev=1` (mean and stdev
of the times themselves), in seconds; each later turn's pause is drawn once when the workload is built and stored in
the artifact (`pause_before_s`), so a replay waits the same times.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.errors import HarnessError

KINDS = ("fixed", "exponential", "uniform", "lognormal")
MAX_PAUSE_S = 3600.0


@dataclass(frozen=True)
class ThinkTime:
    kind: str = "fixed"
    mean_s: float = 0.0  # fixed: the value; uniform: (min + max) / 2
    stdev_s: float = 0.0
    min_s: float = 0.0
    max_s: float = MAX_PAUSE_S

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HarnessError(f"--pause-s kind {self.kind!r} is unknown; known: {', '.join(KINDS)}.")
        for name in ("mean_s", "stdev_s", "min_s", "max_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= MAX_PAUSE_S):
                raise HarnessError(f"--pause-s {name.removesuffix('_s')} must be a number of seconds in [0, {MAX_PAUSE_S:g}], got {v!r}.")
        if self.min_s > self.max_s:
            raise HarnessError(f"--pause-s needs min <= max, got min={self.min_s:g} max={self.max_s:g}.")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, self.mean_s)
        elif self.kind == "exponential":
            x = rng.exponential(self.mean_s, size=n) if self.mean_s > 0 else np.zeros(n)
        elif self.kind == "uniform":
            x = rng.uniform(self.min_s, self.max_s, size=n)
        else:
            if self.mean_s <= 0:
                raise HarnessError("--pause-s lognormal needs mean > 0.")
            s2 = math.log(1.0 + (self.stdev_s / self.mean_s) ** 2)
            x = rng.lognormal(math.log(self.mean_s) - s2 / 2.0, math.sqrt(s2), size=n)
        return np.clip(x, self.min_s, self.max_s)

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_think_time(text: Any) -> ThinkTime:
    """`2`, `exponential:mean=2`, `uniform:min=1,max=5`, `lognormal:mean=2,stdev=1[,min=..,max=..]` (seconds)."""
    if isinstance(text, ThinkTime):
        return text
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return ThinkTime("fixed", float(text))
    hint = (f"--pause-s {text!r}: give seconds (2) or exponential:mean=2, uniform:min=1,max=5, lognormal:mean=2,stdev=1")
    if not isinstance(text, str) or not text.strip():
        raise HarnessError(hint)
    t = text.strip()
    if ":" not in t:
        try:
            return ThinkTime("fixed", float(t))
        except ValueError:
            raise HarnessError(hint) from None
    kind, _, rest = t.partition(":")
    try:
        kv = {k.strip(): float(v) for k, v in (p.split("=", 1) for p in rest.split(",") if p.strip())}
    except ValueError:
        raise HarnessError(hint) from None
    allowed = {"fixed": {"value"}, "exponential": {"mean", "min", "max"}, "uniform": {"min", "max"},
               "lognormal": {"mean", "stdev", "min", "max"}}.get(kind.strip())
    if allowed is None or not set(kv) <= allowed:
        raise HarnessError(hint)
    kind = kind.strip()
    if kind == "uniform" and not {"min", "max"} <= set(kv):
        raise HarnessError(f"{hint} (uniform needs min and max)")
    if kind in ("exponential", "lognormal") and "mean" not in kv:
        raise HarnessError(f"{hint} ({kind} needs mean)")
    lo, hi = kv.get("min", 0.0), kv.get("max", MAX_PAUSE_S)
    mean = kv.get("value", kv.get("mean", (lo + hi) / 2 if kind == "uniform" else 0.0))
    return ThinkTime(kind, mean, kv.get("stdev", 0.0), lo, hi)
