"""TOML input files (scenarios, engine configs): one loader with one error text, and dotted-key overrides."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from harness.errors import HarnessError


def load_toml(path: str | Path, what: str, missing_fix: str = "give an existing file") -> dict[str, Any]:
    """Parse a TOML file; a missing, unreadable, non-UTF-8/binary or malformed one is a HarnessError naming it.

    `what` names the file for the user ("scenario", "engine config"); `missing_fix` says where good ones are.
    """
    p = Path(path)
    if not p.is_file():
        if p.is_dir():
            raise HarnessError(f"{what} {str(p)!r} is a directory, not a TOML file; {missing_fix}.")
        raise HarnessError(f"{what} file {str(p)!r} does not exist; {missing_fix}.")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise HarnessError(f"{what} {p} cannot be read ({exc}).") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{what} {p} is not UTF-8 text (byte {exc.start}: {exc.reason}); it is binary or in another "
                           "encoding: save it as UTF-8 TOML.") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{what} {p} is not valid TOML: {exc}; fix the syntax at that line.") from None


def set_dotted(data: dict[str, Any], key: str, value: Any, where: str, source: str) -> None:
    """Set `section.sub.leaf = value` in a parsed TOML document, making missing sections; `where` names the
    flag or override for the error ("--grid", "override")."""
    *sections, leaf = key.split(".")
    if not leaf or any(not s for s in sections):
        raise HarnessError(f"{where} {key}: an empty name between dots; write section.field=value.")
    d = data
    for s in sections:
        nxt = d.setdefault(s, {})
        if not isinstance(nxt, dict):
            raise HarnessError(f"{where} {key}: {s!r} is not a section of {source}.")
        d = nxt
    d[leaf] = value


def value_or_word(raw: str) -> Any:
    """A command-line value read as TOML (`2`, `0.5`, `true`, `"x"`, `[1, 2]`), else the bare word itself (a mode,
    a path, an allocation name)."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
