"""Pydantic validation errors as lines a user can act on: the field, the value and the fix (engine configs, scenarios)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def field_path(loc: tuple[Any, ...]) -> str:
    """`pools[0].gpu` from pydantic's ("pools", 0, "gpu"); "(top level)" for a model-level error."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def error_lines(exc: ValidationError, docs: str, prefix: str = "") -> list[str]:
    """One indented line per error; `docs` is the page that lists the fields, `prefix` the section validated."""
    lines = []
    for err in exc.errors():
        loc = field_path(tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))))
        loc = f"{prefix}.{loc}" if prefix and loc != "(top level)" else (prefix or loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            lines.append(f"  {loc}: missing; add this field (see {docs})")
        elif err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown field (value {err.get('input')!r}); remove it or check its spelling in {docs}")
        else:
            val = err.get("input")
            shown = "" if isinstance(val, dict) else f" (got {val!r})"
            lines.append(f"  {loc}: {msg}{shown}")
    return lines
