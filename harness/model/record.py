"""The model's records and their one way out: `as_json` turns a frozen record tree into plain JSON values.

Records are frozen dataclasses with units in their field names; they cross into the CLI, the reports
and the target as they are, and become dicts only at the edge (`--json`, a stored plan.json). Field
metadata shapes the JSON without a hand-written dict per record:

- `omit_none()`: the key is left out when the value is None (a section the scenario did not ask for);
- `flatten()`: a nested record's keys are merged into its parent's (an allocation plus its clear-by time);
- `hidden()`: the field stays in the record but not in the JSON (the map key already names it).

Non-finite floats become null (JSON has no infinity: an undeclared link is "no limit", printed null).
A record may define `json_fields(self) -> dict` to give its documented JSON shape when that differs
from its fields (harness.model.stages.StageRates); its values go through as_json again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

_OMIT_NONE = "omit_none"
_FLATTEN = "flatten"
_HIDDEN = "hidden"


def omit_none(default: Any = None) -> Any:
    """A field whose key is absent from the JSON while its value is None."""
    return dataclasses.field(default=default, metadata={_OMIT_NONE: True})


def flatten(*, optional: bool = False) -> Any:
    """A nested record whose keys join its parent's; `optional` gives it a None default that adds nothing."""
    if optional:
        return dataclasses.field(default=None, metadata={_FLATTEN: True, _OMIT_NONE: True})
    return dataclasses.field(metadata={_FLATTEN: True})


def hidden(default: Any = dataclasses.MISSING) -> Any:
    """A field kept out of the JSON."""
    return dataclasses.field(default=default, metadata={_HIDDEN: True})


def as_json(obj: Any) -> Any:
    """The plain JSON value of a record tree (dicts in field order, lists, str, int, float, bool, None)."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        custom = getattr(obj, "json_fields", None)
        if custom is not None:
            return {k: as_json(v) for k, v in custom().items()}
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            meta = f.metadata
            if meta.get(_HIDDEN):
                continue
            value = getattr(obj, f.name)
            if value is None and meta.get(_OMIT_NONE):
                continue
            if meta.get(_FLATTEN):
                nested = as_json(value)
                if not isinstance(nested, dict):
                    raise TypeError(f"{type(obj).__name__}.{f.name}: only a record can be flattened, got {type(value).__name__}")
                out.update(nested)
            else:
                out[f.name] = as_json(value)
        return out
    if isinstance(obj, Mapping):
        return {str(k): as_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [as_json(v) for v in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalars and arrays
        return as_json(obj.tolist())
    raise TypeError(f"as_json: no JSON form for {type(obj).__name__}")
