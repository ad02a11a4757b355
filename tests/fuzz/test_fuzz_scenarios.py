"""Fuzz: every scenario file of the repo with one field changed, removed or added, run through `harness model`."""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import SCENARIOS
from tests.fuzz._contract import FUZZ, NASTY_VALUES, assert_clean, assert_physical, parse_json_output, run_cli

SUBCOMMAND = {"pd-capacity": "plan", "experts-cpu-gpu": "experts", "af-split": "af", "ep-skew": "ep-skew",
              "expert-replicas": "replicas", "kv-tiers": "kv-tiers", "cache-routing": "route", "lifecycle": "lifecycle"}
FILES = sorted(SCENARIOS.glob("*.toml"))
DOCS = {p: tomllib.loads(p.read_text()) for p in FILES}


def leaves(d: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a value (table keys and list indices); tables and lists themselves count too."""
    out = [path] if path else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += leaves(v, (*path, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += leaves(v, (*path, i))
    return out


def mutate(doc: dict, path: tuple, op: str, value: Any) -> dict:
    import copy

    d = copy.deepcopy(doc)
    node = d
    for p in path[:-1]:
        node = node[p]
    last = path[-1]
    if op == "remove":
        del node[last]
    elif op == "add" and isinstance(node, dict):
        node[f"{last}_extra"] = value
    else:
        node[last] = value
    return d


def _sanitize(v: Any) -> Any:
    """TOML cannot hold integers beyond 64 bits or NUL characters: drop what tomli_w refuses."""
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
        return 2**63 - 1
    if isinstance(v, str):
        return v.replace("\x00", "")
    if isinstance(v, list):
        return [_sanitize(x) for x in v]
    if isinstance(v, dict):
        return {str(k).replace("\x00", "") or "k": _sanitize(x) for k, x in v.items()}
    return v


@FUZZ
@given(data=st.data())
def test_scenario_with_one_bad_field(data):
    path_file = data.draw(st.sampled_from(FILES), label="file")
    doc = DOCS[path_file]
    path = data.draw(st.sampled_from(leaves(doc)), label="field")
    op = data.draw(st.sampled_from(["set", "set", "set", "remove", "add"]), label="op")
    value = _sanitize(data.draw(NASTY_VALUES, label="value"))
    mutated = mutate(doc, path, op, value)
    kind = mutated.get("kind", "pd-capacity") if isinstance(mutated.get("kind", "pd-capacity"), str) else "pd-capacity"
    sub = SUBCOMMAND.get(kind, SUBCOMMAND.get(doc.get("kind", "pd-capacity"), "plan"))
    with tempfile.TemporaryDirectory(prefix="fuzz-scenario-") as tmp:
        f = Path(tmp) / "s.toml"
        f.write_text(tomli_w.dumps(mutated))
        argv = ["model", sub, str(f), "--json"] + (["--no-grid"] if sub == "plan" else [])
        code, out, err = run_cli(argv)
    names = [p for p in path if isinstance(p, str)] + [f"{path[-1]}_extra", "kind", "schema_version"]
    assert_clean(code, err, names, strip=str(f))
    if code == 0:
        assert_physical(parse_json_output(out))


@FUZZ
@given(raw=st.binary(max_size=64))
def test_scenario_bytes(raw):
    """Any bytes as a scenario file: a clear error (or, for bytes that happen to be a valid scenario, a result)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-scenario-") as tmp:
        f = Path(tmp) / "s.toml"
        f.write_bytes(raw)
        code, out, err = run_cli(["model", "plan", str(f), "--json", "--no-grid"])
    assert_clean(code, err, ["TOML", "UTF-8", "missing", "kind", "unknown field"], strip=str(f))
