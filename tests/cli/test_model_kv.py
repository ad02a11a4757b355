"""CLI: `harness model kv-tiers | route | lifecycle SCENARIO [--json]` (docs/model-kv.md)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.model.kv_plan import kv_tiers_plan, lifecycle_plan, routing_plan
from harness.model.record import as_json
from harness.specs.scenario_kv import load_kind

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "workloads" / "scenarios"
CASES = [
    ("kv-tiers", "ch9-kv-tiers.toml", "kv-tiers", kv_tiers_plan),
    ("route", "ch9-ex9.7-cache-routing.toml", "cache-routing", routing_plan),
    ("lifecycle", "ch9-lifecycle.toml", "lifecycle", lifecycle_plan),
]


def _leaf_keys(x, out=None):
    out = set() if out is None else out
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(k)
            _leaf_keys(v, out)
    elif isinstance(x, list):
        for v in x:
            _leaf_keys(v, out)
    return out


@pytest.mark.parametrize("sub,file,kind,fn", CASES)
def test_json_is_the_whole_plan(capsys, sub, file, kind, fn):
    assert main(["model", sub, str(SCENARIOS / file), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = json.loads(json.dumps(as_json(fn(load_kind(SCENARIOS / file, kind)))))
    assert got == want


@pytest.mark.parametrize("sub,file,kind,fn", CASES)
def test_every_json_field_is_documented(capsys, sub, file, kind, fn):
    doc = (ROOT / "docs" / "model-kv.md").read_text()
    main(["model", sub, str(SCENARIOS / file), "--json"])
    keys = _leaf_keys(json.loads(capsys.readouterr().out))
    keys -= {"queue-aware", "lru", "fifo", "global_kv_transfer", "encoder_swa_restore"}  # values of the scenario, not fields
    # a field is documented when it appears in backticks, alone or as the last part of a dotted path (`a.b[].key`)
    missing = sorted(k for k in keys if not re.search(rf"`(?:[\w\-\[\]]+\.)*{re.escape(k)}(?:\[\])?`", doc))
    assert not missing, f"fields missing from docs/model-kv.md: {missing}"


def test_text_summaries(capsys):
    assert main(["model", "route", str(SCENARIOS / "ch9-ex9.7-cache-routing.toml")]) == 0
    out = capsys.readouterr().out
    assert "local-hit" in out and "280.9 ms" in out and "6.30 GB/s" in out and "p > 7.0%" in out
    assert main(["model", "kv-tiers", str(SCENARIOS / "ch9-kv-tiers.toml")]) == 0
    out = capsys.readouterr().out
    assert "48.3 ms" in out and "79.2 ms" in out and "31.7× over" in out
    assert main(["model", "lifecycle", str(SCENARIOS / "ch9-lifecycle.toml")]) == 0
    out = capsys.readouterr().out
    assert "50,000 steps" in out and "1.65 s" in out and "replay 1024 tokens" in out


@pytest.mark.parametrize("args,needle", [
    (["model", "kv-tiers", "no/such.toml"], "does not exist"),
    (["model", "route", str(SCENARIOS / "ch9-kv-tiers.toml")], "of kind 'kv-tiers', not 'cache-routing'"),
    (["model", "lifecycle", str(SCENARIOS / "ch9-hetero-pd.toml")], "of kind 'pd-capacity', not 'lifecycle'"),
])
def test_bad_input_exits_1_with_a_message(capsys, args, needle):
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and "Traceback" not in err


def test_invalid_field_through_the_console_script(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "cache-routing"\nname = "x"\nholder_queue_s = "soon"\nfree_queue_s = 0.02\n')
    r = subprocess.run([sys.executable, "-m", "harness", "model", "route", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "holder_queue_s" in r.stderr and "'soon'" in r.stderr and "Traceback" not in r.stderr
