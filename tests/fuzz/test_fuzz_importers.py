"""Fuzz: each importer's committed sample with one field changed, removed or added, through `harness micro import`."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.fuzz._contract import FUZZ, NASTY_VALUES, assert_clean, run_cli
from tests.fuzz.test_fuzz_scenarios import leaves, mutate

DATA = ROOT / "tests" / "data" / "importers"
SAMPLES = {"nccl-tests": [DATA / "nccl_tests.json", DATA / "nccl_tests_v2.json"], "nvbandwidth": [DATA / "nvbandwidth.json"],
           "pytest-benchmark": [DATA / "pytest_benchmark.json"]}
CHOICES = [(fmt, p) for fmt, ps in SAMPLES.items() for p in ps]
DOCS = {p: json.loads(p.read_text()) for _, p in CHOICES}


def _check_run(run_dir: str) -> None:
    from harness.store import Run

    run = Run(run_dir)
    if "micro_cases" not in run.tables():
        return
    cases = run.table("micro_cases")
    for col in ("median_s", "mean_s", "min_s"):
        v = cases[col].dropna()
        assert (v > 0).all() and v.map(math.isfinite).all(), f"{col}: {list(v)}"
    for col in ("bytes_per_s", "flops_per_s", "useful_bytes", "useful_flops"):
        v = cases[col].dropna()
        assert (v >= 0).all() and v.map(math.isfinite).all(), f"{col}: {list(v)}"


@FUZZ
@given(data=st.data())
def test_importer_input_with_one_bad_field(data):
    fmt, sample = data.draw(st.sampled_from(CHOICES), label="sample")
    doc = DOCS[sample]
    path = data.draw(st.sampled_from(leaves(doc)), label="field")
    op = data.draw(st.sampled_from(["set", "set", "set", "remove", "add"]), label="op")
    value = data.draw(NASTY_VALUES, label="value")
    mutated = mutate(doc, path, op, value)
    with tempfile.TemporaryDirectory(prefix="fuzz-import-") as tmp:
        f = Path(tmp) / "in.json"
        f.write_text(json.dumps(mutated, allow_nan=True))
        code, out, err = run_cli(["micro", "import", fmt, str(f), "--out", str(Path(tmp) / "results"), "--json"])
        names = [p for p in path if isinstance(p, str)] + [f"[{p}]" for p in path if isinstance(p, int)] + ["version"]
        assert_clean(code, err, names, strip=str(f))
        if code == 0:
            _check_run(json.loads(out)["path"])


def _all_formats() -> list[str]:
    from harness.importers import IMPORTERS

    return sorted(IMPORTERS)


@FUZZ
@given(fmt=st.sampled_from(_all_formats()), raw=st.binary(max_size=64))
def test_importer_bytes(fmt, raw):
    with tempfile.TemporaryDirectory(prefix="fuzz-import-") as tmp:
        f = Path(tmp) / "in.json"
        f.write_bytes(raw)
        code, out, err = run_cli(["micro", "import", fmt, str(f), "--out", str(Path(tmp) / "results"), "--json"])
    assert_clean(code, err, ["JSON", "UTF-8", "must be", "no field", "not the stdout", "not nixlbench", "no result"],
                 strip=str(f))
