"""Fuzz: a real calibration file with one field changed, removed or added, applied by `harness model plan`."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, SCENARIOS
from tests.fuzz._contract import FUZZ, NASTY_VALUES, assert_clean, assert_physical, parse_json_output, run_cli
from tests.fuzz.test_fuzz_scenarios import leaves, mutate

SCENARIO = SCENARIOS / "ch9-hetero-pd.toml"


@functools.lru_cache(maxsize=1)
def calibration_doc() -> dict:
    from harness.calibration.file import dumps
    from harness.calibration.fit import fit_calibration
    from harness.calibration.runs import load_machine_runs

    rec = fit_calibration(load_machine_runs(ROOT / "tests" / "data" / "runs" / "synthetic-h200"), n_bootstrap=20)
    return json.loads(dumps(rec))


def _json_safe(v):
    if isinstance(v, float) and v != v:
        return "nan"  # JSON has no NaN literal the harness writes; a string stands for the tool that wrote one
    return v


@FUZZ
@given(data=st.data())
def test_calibration_with_one_bad_field(data):
    doc = calibration_doc()
    path = data.draw(st.sampled_from([p for p in leaves(doc) if p[0] != "readme"]), label="field")
    op = data.draw(st.sampled_from(["set", "set", "set", "remove", "add"]), label="op")
    value = data.draw(NASTY_VALUES, label="value")
    mutated = mutate(doc, path, op, value)
    with tempfile.TemporaryDirectory(prefix="fuzz-calibration-") as tmp:
        f = Path(tmp) / "c.json"
        f.write_text(json.dumps(mutated, allow_nan=True))
        code, out, err = run_cli(["model", "plan", str(SCENARIO), "--calibration", str(f), "--json", "--no-grid"])
    names = [p for p in path if isinstance(p, str)] + ["format", "schema_version", "format_version"]
    assert_clean(code, err, names, strip=str(f))
    if code == 0:
        assert_physical(parse_json_output(out))


@FUZZ
@given(raw=st.binary(max_size=64))
def test_calibration_bytes(raw):
    with tempfile.TemporaryDirectory(prefix="fuzz-calibration-") as tmp:
        f = Path(tmp) / "c.json"
        f.write_bytes(raw)
        code, out, err = run_cli(["model", "plan", str(SCENARIO), "--calibration", str(f), "--json", "--no-grid"])
    assert_clean(code, err, ["JSON", "UTF-8", "calibration file"], strip=str(f))
