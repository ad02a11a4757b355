"""Shared output helpers for verbs: JSON printing with non-finite numbers made explicit."""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _clean(x.item())
    return x


def print_json(obj: Any) -> None:
    json.dump(_clean(obj), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
