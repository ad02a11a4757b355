"""The settings grid of a sweep: `--grid KEY=V1,V2,...` options, their cartesian product, one dict per point.

Keys name a setting of the target: an engine config's `section.field` (llama_cpp.batch_size), an
embedded target flag (mode, allocation), or, for the embedded target, a scenario field
`scenario.section.field` (scenario.workload.decode_batch). Keys joined by '+' take the same value
together (llama_cpp.batch_size+llama_cpp.ubatch_size=64,256: -b = -ub = 64, then 256), which is how
a chunk threshold that two flags share is swept without invalid combinations.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

from harness.errors import HarnessError
from harness.toml_file import value_or_word

MAX_POINTS = 256


@dataclass(frozen=True)
class GridAxis:
    keys: tuple[str, ...]  # set together
    values: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "values": list(self.values)}


def _value(raw: str) -> Any:
    return value_or_word(raw)


def parse_axis(text: str) -> GridAxis:
    """'KEY=V1,V2' or 'K1+K2=V1,V2' -> GridAxis; errors name the option and the fix."""
    key, sep, raw = (text or "").partition("=")
    keys = tuple(k.strip() for k in key.split("+"))
    if not sep or not all(keys) or not raw.strip():
        raise HarnessError(f"--grid {text!r}: write KEY=V1,V2,... (e.g. llama_cpp.batch_size=64,256,2048 or mode=pd,colocated).")
    if len(set(keys)) != len(keys):
        raise HarnessError(f"--grid {text!r}: a key appears twice in {'+'.join(keys)}; list each key once.")
    values = tuple(_value(v.strip()) for v in raw.split(","))
    if any(v == "" for v in values):
        raise HarnessError(f"--grid {text!r}: an empty value; separate values with single commas.")
    if len(set(map(repr, values))) != len(values):
        raise HarnessError(f"--grid {text!r}: a value appears twice; give each value once.")
    return GridAxis(keys, values)


def expand(axes: Sequence[GridAxis]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, as {key: value}; a key on two axes is an error."""
    seen: set[str] = set()
    for a in axes:
        dup = seen & set(a.keys)
        if dup:
            raise HarnessError(f"--grid: key(s) {sorted(dup)} appear on two --grid options; give each key once.")
        seen |= set(a.keys)
    n = 1
    for a in axes:
        n *= len(a.values)
    if n > MAX_POINTS:
        raise HarnessError(f"--grid: {n} settings is more than {MAX_POINTS}; narrow the grid (each point is one load run).")
    points = []
    for combo in itertools.product(*(a.values for a in axes)):
        point: dict[str, Any] = {}
        for a, v in zip(axes, combo):
            for k in a.keys:
                point[k] = v
        points.append(point)
    return points


def label(point: dict[str, Any]) -> str:
    """'llama_cpp.batch_size=64 llama_cpp.ubatch_size=64'; 'default' for the empty point."""
    return " ".join(f"{k}={v}" for k, v in point.items()) or "default"
