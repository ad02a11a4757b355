"""`harness model experts|af|ep-skew|replicas`: whole outputs, documented JSON fields, chapter
numbers through the CLI, and bad input -> `error: ...`, exit 1."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import ROOT, SCENARIOS

DATA = Path(__file__).parent / "data"
DOC = ROOT / "docs" / "model-experts.md"
RUNS = {
    "experts": "ch9-ex9.3-cpu-gpu-experts",
    "af": "ch9-ex9.4-af",
    "ep-skew": "ch9-ex9.5-ep-skew",
    "replicas": "ch9-ex9.6-replicas",
}
# JSON objects whose keys are names (dtypes, models, GPUs, batch counts), documented as <name>
MAPS = {"balance_tokens", "states", "net_gain_s", "memory_budget", "extra_s_per_request_step", "extra_s_per_request",
        "decode_s_per_request_before", "decode_s_per_request_after", "prefill", "decode", "prefill_step"}


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys, sub, *extra):
    code, out, err = run(capsys, "model", sub, str(SCENARIOS / f"{RUNS[sub]}.toml"), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("sub", sorted(RUNS))
def test_summary_matches_golden(capsys, sub):
    code, out, err = run(capsys, "model", sub, str(SCENARIOS / f"{RUNS[sub]}.toml"))
    assert code == 0, err
    assert out == (DATA / f"model-{sub}-{RUNS[sub]}.txt").read_text()


def json_paths(obj, prefix="", keys=None):
    keys = set() if keys is None else keys
    if isinstance(obj, dict):
        parent = prefix.rsplit(".", 1)[-1].removesuffix("[]")
        for k, v in obj.items():
            name = "<name>" if prefix and parent in MAPS else k
            json_paths(v, f"{prefix}.{name}" if prefix else name, keys)
    elif isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        for v in obj:
            json_paths(v, prefix + "[]", keys)
    else:
        keys.add(prefix)
    return keys


@pytest.mark.parametrize("sub", sorted(RUNS))
def test_every_json_field_is_documented(capsys, sub):
    r = run_json(capsys, sub, *(["--batches", "5"] if sub == "ep-skew" else []))
    documented = set(re.findall(r"`([^`\s]+)`", DOC.read_text()))
    missing = sorted(p for p in json_paths(r) if p not in documented)
    assert not missing, f"fields missing from docs/model-experts.md: {missing}"


def test_experts_json_reproduces_example_9_3(capsys):
    r = run_json(capsys, "experts")
    by = {(p["cpu_kernel"], p["numa"]): p for p in r["paths"]}
    avx, amx = by["avx512", "local"], by["amx", "local"]
    assert avx["cases"][0]["cpu_s"] == pytest.approx(1.46e-3, abs=0.005e-3)  # example 9.3
    assert avx["cases"][0]["gpu_s"] == pytest.approx(12.5e-3, abs=0.05e-3)
    assert avx["cases"][1]["cpu_s"] == pytest.approx(22.2e-3, abs=0.05e-3)
    assert amx["cases"][1]["cpu_s"] == pytest.approx(2.57e-3, abs=0.005e-3)
    assert (avx["crossover"]["last_cpu_tokens"], avx["crossover"]["first_gpu_tokens"]) == (71, 72)
    assert (amx["crossover"]["last_cpu_tokens"], amx["crossover"]["first_gpu_tokens"]) == (688, 689)
    assert by["amx", "remote"]["cpu_balance_tokens"] == pytest.approx(170, abs=0.5)
    assert r["balance_tokens"]["int8"]["avx512/local"] == pytest.approx(4.1, abs=0.05)  # exercise 9-3
    res = {x["resident_per_layer"]: x for x in r["capacity"]["resident"]}
    assert res[32]["resident_all_layers_bytes"] / 2**30 == pytest.approx(106, abs=0.5) and not res[32]["fits"]
    assert r["capacity"]["reuse"]["random"]["experts_touched"] == pytest.approx(126, abs=0.5)


def test_af_json_reproduces_example_9_4(capsys):
    r = run_json(capsys, "af")
    b25 = r["per_bandwidth"][0]
    assert b25["decode_step"]["total_s"] == pytest.approx(0.384e-3, abs=0.0005e-3)
    req = {(q["state"], q["decode_steps"]): q for q in b25["requests"]}
    assert req["qwen3-8b", 1024]["af_s"] == pytest.approx(0.393, abs=0.0005)
    assert req["qwen3-8b", 1024]["af_over_pd"] == pytest.approx(8.1, abs=0.05)
    assert req["deepseek-v3", 1024]["af_over_pd"] == pytest.approx(17, abs=0.1)
    alpha = {(bw["bandwidth_bytes_per_s"], q["state"]): q["critical_startup_latency_s"]
             for bw in r["per_bandwidth"] for q in bw["requests"]}
    for key, want in {(25e9, "qwen3-8b"): 680e-6, (50e9, "qwen3-8b"): 340e-6,
                      (25e9, "deepseek-v3"): 324e-6, (50e9, "deepseek-v3"): 162e-6}.items():
        assert alpha[key] == pytest.approx(want, abs=0.5e-6)
    assert (r["pipeline"]["serial_s"], r["pipeline"]["pipelined_s"]) == pytest.approx((20e-3, 14e-3))
    m = r["mla_compact_path"]
    assert m["decode_s_per_request_after"]["h20-96gb"] == pytest.approx(0.907, abs=0.001)
    assert m["decode_pool_requests_per_s_after"] == pytest.approx(4.41, abs=0.005)
    assert m["max_extra_s_per_request_step"] == pytest.approx(258e-6, abs=0.5e-6)


def test_ep_skew_json_reproduces_example_9_5(capsys):
    r = run_json(capsys, "ep-skew")
    rand = {x["ep"]: x["mean_max_over_mean"] for x in r["random_routing"]}
    assert rand[8] == pytest.approx(1.04, abs=0.01) and rand[256] == pytest.approx(1.52, abs=0.02)
    totals = [c["barrier_total_s"] * 1e3 for c in r["exchange"]["cases"]]
    assert totals == pytest.approx([0.827, 2.068, 2.841, 1.649, 0.577], abs=0.0006)
    assert r["overlap"]["pipeline"]["pipelined_s"] == pytest.approx(0.581e-3, abs=0.0005e-3)


def test_replicas_json_reproduces_example_9_6(capsys):
    r = run_json(capsys, "replicas")
    assert (r["plan"]["before_s"], r["plan"]["after_s"]) == pytest.approx((0.550e-3, 0.309e-3), abs=0.0005e-3)
    assert [c["payback_batches"] for c in r["copies"]] == [3, 23]
    assert [c["copy_s"] for c in r["copies"]] == pytest.approx([0.62220256e-3, 5.31982304e-3], rel=1e-9)
    assert [chk["feasible"] for chk in r["free_memory_checks"]] == [True, False]


def test_flags_override_the_scenario(capsys):
    r = run_json(capsys, "experts", "--tokens-per-expert", "72", "--experts", "1")
    case = r["paths"][0]["cases"][0]
    assert case["tokens_per_expert"] == [72] and case["faster"] == "gpu"
    r = run_json(capsys, "replicas", "--free-bytes-per-receiver", str(32 * 2**20))
    assert r["plan"]["feasible"] is False and r["copies"][0]["payback_batches"] is None
    r = run_json(capsys, "ep-skew", "--batches", "3", "--seed", "9")
    assert {x["batches"] for x in r["random_routing"]} == {3} and r["random_routing"][0]["seed"] == 9
    r = run_json(capsys, "af", "--bandwidth-bytes-per-s", "12.5e9", "--startup-latency-s", "0")
    assert r["per_bandwidth"][0]["decode_step"]["total_s"] == pytest.approx(576 * 1024 / 12.5e9)


@pytest.mark.parametrize("argv, message", [
    (["experts", "ch9-ex9.3-cpu-gpu-experts", "--tokens-per-expert", "-1"],
     r"batch\.tokens_per_expert\[0\]: Input should be greater than or equal to 0 \(got -1\)"),
    (["experts", "ch9-ex9.3-cpu-gpu-experts", "--experts", "129"], r"batch\.experts \(129\) exceeds the model's 128 routed experts"),
    (["ep-skew", "ch9-ex9.5-ep-skew", "--batches", "0"], r"routing\.batches: Input should be greater than or equal to 1 \(got 0\)"),
    (["replicas", "ch9-ex9.6-replicas", "--replicas", "9"], r"replicas \(9\) exceeds the 8 experts on the hot card"),
    (["af", "ch9-ex9.4-af", "--bandwidth-bytes-per-s", "-5"], r"af\.bandwidths_bytes_per_s\[0\]: Input should be greater than 0"),
    (["af", "ch9-ex9.3-cpu-gpu-experts"], r"is of kind 'experts-cpu-gpu', not 'af-split'; run it with `harness model experts`"),
    (["experts", "ch9-hetero-pd"], r"is of kind 'pd-capacity', not 'experts-cpu-gpu'; run it with `harness model plan`"),
    (["replicas", "no-such-file"], r"does not exist"),
])
def test_bad_input_exits_1_with_a_named_field(capsys, argv, message):
    sub, name, *rest = argv
    code, out, err = run(capsys, "model", sub, str(SCENARIOS / f"{name}.toml"), *rest)
    assert code == 1
    assert out == ""
    assert err.startswith("error: ")
    assert re.search(message, err), err


def _edited(tmp_path, name, old, new):
    text = (SCENARIOS / f"{name}.toml").read_text()
    assert old in text
    p = tmp_path / f"{name}.toml"
    p.write_text(text.replace(old, new, 1))
    return str(p)


@pytest.mark.parametrize("sub, name, old, new, message", [
    ("ep-skew", "ch9-ex9.5-ep-skew", "assignments = [[512, 512, 512, 512], [512, 512, 512, 512], [512, 512, 512, 512], [512, 512, 512, 512]]",
     "assignments = [[512, 512, 512, 512], [512, 512, 512, 512], [512, 512, 512, 512]]",
     r"case 'uniform, cross-server': assignments is 3×4 but the exchange has 4 sources × 4 groups"),
    ("ep-skew", "ch9-ex9.5-ep-skew", "top_k = 8", "top_k = 300", r"top_k \(300\) exceeds n_experts \(256\)"),
    ("ep-skew", "ch9-ex9.5-ep-skew", "tokens = 1024", "tokens = -4", r"routing\.tokens: Input should be greater than or equal to 0 \(got -4\)"),
    ("ep-skew", "ch9-ex9.5-ep-skew", "ep_sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]", "ep_sizes = [3]", r"ep_sizes \[3\] do not divide n_experts \(256\)"),
    ("experts", "ch9-ex9.3-cpu-gpu-experts", 'spec = "xeon-platinum-8452y"', 'spec = "xeon-9999"', r"cpu\.spec: unknown CPU 'xeon-9999'"),
    ("experts", "ch9-ex9.3-cpu-gpu-experts", 'kernels = ["avx512", "amx"]', 'kernels = ["sse"]', r"cpu\.kernels\[0\]"),
    ("experts", "ch9-ex9.3-cpu-gpu-experts", "resident_per_layer = [32, 16]", "resident_per_layer = [200]",
     r"resident_per_layer value 200 exceeds the model's 128 routed experts"),
    ("af", "ch9-ex9.4-af", 'state_model = "deepseek-v3"', 'state_model = "qwen3-8b"', r"state_model 'qwen3-8b' is not an MLA model"),
    ("replicas", "ch9-ex9.6-replicas", 'link = "nvlink-h100"', 'link = "nvlink-9"', r"copies\[0\]\.link: unknown link 'nvlink-9'"),
    ("replicas", "ch9-ex9.6-replicas", "tile_m = 64", "tile_m = 64\nwarp = 3", r"hot\.warp: unknown field"),
])
def test_bad_scenario_file_exits_1(tmp_path, capsys, sub, name, old, new, message):
    code, out, err = run(capsys, "model", sub, _edited(tmp_path, name, old, new))
    assert code == 1
    assert err.startswith("error: ")
    assert re.search(message, err), err


def test_python_dash_m_prints_no_traceback():
    p = subprocess.run(
        [sys.executable, "-m", "harness", "model", "experts", str(SCENARIOS / "ch9-ex9.3-cpu-gpu-experts.toml"),
         "--tokens-per-expert", "-5"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert p.returncode == 1
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr


def test_scenario_kinds_are_registered():
    from harness.specs.scenario import load_any_scenario

    for sub, name in RUNS.items():
        s = load_any_scenario(SCENARIOS / f"{name}.toml")
        assert s.name == name
