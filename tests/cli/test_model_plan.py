"""`harness model plan`: whole outputs, JSON fields of the issue, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import ROOT, SCENARIOS, scenario_variant

GOLDEN = Path(__file__).parent / "data" / "plan-ch9-hetero-pd.txt"


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_summary_matches_golden(capsys):
    code, out, _ = run(capsys, "model", "plan", str(SCENARIOS / "ch9-hetero-pd.toml"))
    assert code == 0
    assert out == GOLDEN.read_text()


def test_json_has_documented_fields(capsys):
    code, out, _ = run(capsys, "model", "plan", str(SCENARIOS / "ch9-hetero-pd.toml"), "--json")
    assert code == 0
    r = json.loads(out)
    for gpu in ("a100-80gb-sxm", "h20-96gb"):
        s = r["stage_rates"][gpu]
        for f in ("prefill_tokens_per_s", "decode_calls_per_s", "prefill_s_per_request", "decode_s_per_request", "bound"):
            assert f in s
    for f in ("bytes_per_token", "bytes_per_request", "transfer_s"):
        assert f in r["kv"]
    assert r["colocated"]["requests_per_s"] == pytest.approx(3.02, abs=0.005)
    for f in ("prefill", "decode", "requests_per_s", "prefill_pool_requests_per_s", "decode_pool_requests_per_s", "link_requests_per_s"):
        assert f in r["pd"]["best"]
    assert len(r["pd"]["grid"]) == 25
    assert r["chunked_colocated"]["requests_per_s"] > 0
    assert r["drain"]["replicas"]["clear_at_s"] is None
    assert r["drain"]["pd"]["clear_at_s"] == pytest.approx(43.2, abs=0.1)


MAPS = ("stage_rates", "per_gpu", "drain", "references", "reuse_pair", "shared_pool_states", "efficiency_scale")
ALLOCATION_FIELDS = ("prefill", "decode", "requests_per_s", "prefill_pool_requests_per_s",
                     "decode_pool_requests_per_s", "link_requests_per_s", "bound")


def documented_keys(r: dict) -> set[str]:
    """Every JSON path, with map keys (GPU names, scheme names) as <name>; allocation objects are
    documented once as a type, so the walk stops at them."""
    keys: set[str] = set()

    def walk(prefix, obj):
        if isinstance(obj, dict):
            if prefix and set(ALLOCATION_FIELDS) <= set(obj):
                keys.update(f"allocation.{f}" for f in ALLOCATION_FIELDS)
                extra = set(obj) - set(ALLOCATION_FIELDS)
                keys.update(f"{prefix}.{k}" for k in extra)
                return
            for k, v in obj.items():
                if prefix.endswith(MAPS):
                    k = "<name>"
                key = f"{prefix}.{k}" if prefix else k
                keys.add(key)
                walk(key, v)
        elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
            walk(prefix + "[]", obj[0])

    walk("", r)
    return keys


def test_every_json_field_is_documented(capsys):
    doc = (ROOT / "docs" / "model.md").read_text()
    missing = set()
    for name in ("ch9-hetero-pd", "ch9-long-output"):
        _, out, _ = run(capsys, "model", "plan", str(SCENARIOS / f"{name}.toml"), "--json")
        missing |= {k for k in documented_keys(json.loads(out)) if f"`{k}`" not in doc}
    assert not missing, f"fields without a `name` entry in docs/model.md: {sorted(missing)}"


def test_bad_scenario_exits_1_with_message(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text((SCENARIOS / "ch9-hetero-pd.toml").read_text().replace('gpu = "h20-96gb"', 'gpu = "h21"'))
    code, out, err = run(capsys, "model", "plan", str(p))
    assert code == 1
    assert err.startswith("error: scenario") and "pools[1].gpu" in err and "'h21'" in err
    assert "Traceback" not in err


def test_python_m_entry_point_and_usage_error():
    r = subprocess.run([sys.executable, "-m", "harness", "model", "plan"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "scenario" in r.stderr


def test_specs_and_list(capsys):
    code, out, _ = run(capsys, "specs", "gpus")
    assert code == 0 and "h200-sxm" in out and "source:" in out
    code, out, _ = run(capsys, "specs", "cpus")
    assert code == 0 and "xeon-platinum-8452y" in out and "21.3" in out
    code, out, _ = run(capsys, "model", "list")
    assert code == 0 and "ch9-hetero-pd.toml" in out


_variant = scenario_variant


def _one_type_without_link_or_deadline(tmp_path):
    text = (SCENARIOS / "ch9-hetero-pd.toml").read_text()
    text = text.replace('[[pools]]\ngpu = "h20-96gb"\ncount = 4\n', "").replace('[link]\nspec = "nic-200g"\n', "")
    text = text[: text.index("[[reference_allocations]]")] + text[text.index("[sensitivity]"):]
    p = tmp_path / "one-type.toml"
    p.write_text(text.replace("deadline_s = 60.0\n", ""))
    return str(p)


def test_one_output_token_keeps_the_deployment_and_the_cost(tmp_path, capsys):
    # issue 18: with G = 1 there is no PD split, and `deployment` was null with [cost] dropped silently
    path = _variant(tmp_path, "g1", ("output_tokens = 1025", "output_tokens = 1"))
    code, out, _ = run(capsys, "model", "plan", path, "--json")
    r = json.loads(out)
    assert code == 0 and r["pd"] is None
    dep = r["deployment"]
    assert [row["scheme"] for row in dep["schemes"]] == ["replicas"]
    assert "G = 1" in dep["note"]
    mu = r["colocated"]["requests_per_s"]
    assert dep["cost"]["per_1000_at_capacity"]["replicas"] == pytest.approx(8.0 / (3600 * mu) * 1000)
    assert dep["cost"]["per_1000_at_capacity"]["pd"] is None
    assert dep["cost"]["good_requests_per_s"] == pytest.approx(0.25 * mu)
    code, out, _ = run(capsys, "model", "plan", path)
    assert "no PD split: one output token" in out and "cost per 1000 requests (CNY, 8/h)" in out and "None" not in out


def test_one_gpu_type_without_link_or_deadline(tmp_path, capsys):
    # issue 18: one GPU type without a link dropped `deployment`; the text printed "None" for a missing deadline
    path = _one_type_without_link_or_deadline(tmp_path)
    code, out, _ = run(capsys, "model", "plan", path)
    assert code == 0 and "None" not in out
    assert "no [link]" in out and "scale-out: 3 copies to keep up (3.50 req/s)" in out and "for the deadline" not in out
    code, out, _ = run(capsys, "model", "plan", path, "--json")
    r = json.loads(out)
    assert r["deployment"]["cost"]["currency"] == "CNY" and r["deployment"]["reuse_pair"] == {}
    assert r["deployment"]["scale_out"]["copies_for_deadline"] is None


def test_fields_of_edge_cases_are_documented(tmp_path, capsys):
    """The fields that appear only when something does not fit or is missing are documented too."""
    doc = (ROOT / "docs" / "model.md").read_text()
    paths = [
        _variant(tmp_path, "b64", ("decode_batch = 32", "decode_batch = 64")),
        _variant(tmp_path, "dsv3", ('model = "qwen3-8b"', 'model = "deepseek-v3"'), ('compare_states = ["deepseek-v3"]\n', "")),
        _variant(tmp_path, "g1", ("output_tokens = 1025", "output_tokens = 1")),
        _one_type_without_link_or_deadline(tmp_path),
    ]
    missing = set()
    for p in paths:
        _, out, _ = run(capsys, "model", "plan", p, "--json")
        missing |= {k for k in documented_keys(json.loads(out)) if f"`{k}`" not in doc}
    missing.discard("pd.grid_omitted")  # only for grids above 100k allocations: tests/model/test_plan_bounds.py
    assert "`pd.grid_omitted`" in doc
    assert not missing, f"fields without a `name` entry in docs/model.md: {sorted(missing)}"
