"""Token-length distributions for synthetic requests: fixed, uniform, normal, lognormal, seeded, clipped to [min, max].

Written on the command line as a number (`512`: fixed) or `KIND:key=value,...`:
  fixed:value=512            uniform:min=128,max=1024
  normal:mean=512,stdev=64[,min=..,max=..]
  lognormal:mean=512,stdev=256[,min=..,max=..]   (mean and stdev of the lengths themselves, not of their log)
Samples are rounded to integers and clipped to [min, max] (min defaults to 1); the clipping is recorded.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.errors import HarnessError

KINDS = ("fixed", "uniform", "normal", "lognormal")
MAX_TOKENS = 10_000_000  # a bound far above any model's context, so a typo (1e20) is refused instead of allocated


@dataclass(frozen=True)
class LengthDist:
    kind: str
    mean: float
    stdev: float = 0.0
    min: int = 1
    max: int = MAX_TOKENS

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HarnessError(f"length distribution kind {self.kind!r} is unknown; known: {', '.join(KINDS)}.")
        for name in ("mean", "stdev"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise HarnessError(f"length distribution {name} must be a finite number >= 0, got {v!r}.")
        if not (isinstance(self.min, int) and isinstance(self.max, int) and 0 <= self.min <= self.max <= MAX_TOKENS):
            raise HarnessError(f"length distribution needs 0 <= min <= max <= {MAX_TOKENS}, got min={self.min!r} max={self.max!r}.")
        if self.kind != "uniform" and not self.min <= self.mean <= self.max:
            raise HarnessError(f"length distribution mean {self.mean:g} is outside [min, max] = [{self.min}, {self.max}].")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, self.mean)
        elif self.kind == "uniform":
            return rng.integers(self.min, self.max + 1, size=n)
        elif self.kind == "normal":
            x = rng.normal(self.mean, self.stdev, size=n)
        else:  # lognormal with the given mean and stdev of the lengths
            if self.mean <= 0:
                raise HarnessError("lognormal length distribution needs mean > 0.")
            s2 = math.log(1.0 + (self.stdev / self.mean) ** 2)
            x = rng.lognormal(math.log(self.mean) - s2 / 2.0, math.sqrt(s2), size=n)
        return np.clip(np.rint(x), self.min, self.max).astype(np.int64)

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed" or (self.kind != "uniform" and self.stdev == 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{self.mean:g}"
        if self.kind == "uniform":
            return f"uniform[{self.min}, {self.max}]"
        return f"{self.kind}(mean {self.mean:g}, stdev {self.stdev:g}, [{self.min}, {self.max}])"


def parse_length(text: str | int, flag: str) -> LengthDist:
    """`512`, `fixed:value=512`, `uniform:min=1,max=9`, `normal:mean=..,stdev=..`, `lognormal:mean=..,stdev=..`."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not text.strip():
        raise HarnessError(f"{flag} must be a token count or KIND:key=value,... ({', '.join(KINDS)}), got {text!r}.")
    t = text.strip()
    hint = f"{flag} {t!r}: expected a token count (512) or e.g. normal:mean=512,stdev=64 or uniform:min=128,max=1024"
    try:
        if ":" not in t:
            v = float(t)
            if v != int(v) or not 0 <= v <= MAX_TOKENS:
                raise HarnessError(f"{flag} {t!r} must be an integer token count in [0, {MAX_TOKENS}].")
            return LengthDist("fixed", int(v), 0.0, min(1, int(v)), max(int(v), 1))
        kind, _, rest = t.partition(":")
        kv: dict[str, float] = {}
        for part in filter(None, rest.split(",")):
            k, eq, v = part.partition("=")
            if not eq:
                raise ValueError
            kv[k.strip()] = float(v)
    except (ValueError, OverflowError):
        raise HarnessError(hint + ".") from None
    kind = kind.strip()
    allowed = {"fixed": {"value"}, "uniform": {"min", "max"}, "normal": {"mean", "stdev", "min", "max"},
               "lognormal": {"mean", "stdev", "min", "max"}}.get(kind)
    if allowed is None:
        raise HarnessError(f"{flag}: distribution {kind!r} is unknown; known: {', '.join(KINDS)}.")
    if set(kv) - allowed:
        raise HarnessError(f"{flag}: {kind} takes {', '.join(sorted(allowed))}, got {', '.join(sorted(set(kv) - allowed))}.")

    def _int(name: str, default: int) -> int:
        v = kv.get(name, default)
        if not math.isfinite(v) or v != int(v) or v < 0 or v > MAX_TOKENS:
            raise HarnessError(f"{flag}: {name} must be an integer token count in [0, {MAX_TOKENS}], got {v!r}.")
        return int(v)

    try:
        if kind == "fixed":
            if "value" not in kv:
                raise HarnessError(f"{flag}: fixed needs value=N.")
            v = _int("value", 0)
            return LengthDist("fixed", v, 0.0, min(1, v), max(v, 1))
        if kind == "uniform":
            if not {"min", "max"} <= set(kv):
                raise HarnessError(f"{flag}: uniform needs min=A,max=B.")
            lo, hi = _int("min", 1), _int("max", 1)
            return LengthDist("uniform", (lo + hi) / 2.0, 0.0, lo, hi)
        if not {"mean", "stdev"} <= set(kv):
            raise HarnessError(f"{flag}: {kind} needs mean=M,stdev=S.")
        return LengthDist(kind, kv["mean"], kv["stdev"], _int("min", 1), _int("max", MAX_TOKENS))
    except HarnessError as exc:
        msg = str(exc)
        raise HarnessError(msg if msg.startswith(flag) else f"{flag}: {msg}") from None
