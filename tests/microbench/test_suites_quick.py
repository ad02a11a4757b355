"""Every suite in its --quick form on the CPU: valid records, stated work, honest flags, within the CI time bound."""

import json
import time

import pytest

from harness.records import validate_table
from harness.store import Run
from microbench.suite import SUITES


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from microbench.runner import run_micro

    out = tmp_path_factory.mktemp("results")
    t0 = time.perf_counter()
    summary = run_micro("all", quick=True, out=out, device="cpu", storage_path=out, command_line=["pytest"])
    return summary, Run(summary.path), time.perf_counter() - t0


def test_quick_run_is_fast_enough(quick_run, speed_goals_judged):
    # The issue asks for well under ~2 minutes on 2 cores. A speed goal is judged only when benchmarks run
    # (`make bench`); under `make test` a busy machine must not fail the suite, so only completion is checked.
    assert quick_run[2] > 0
    if speed_goals_judged:
        assert quick_run[2] < 150, f"quick run of every suite took {quick_run[2]:.0f} s (goal 150 s)"


def test_manifest_and_tables_valid(quick_run):
    summary, run, _ = quick_run
    m = run.manifest
    assert m.status == "complete" and m.kind == "micro" and m.extra["suites"] == list(SUITES)
    assert m.cpu_model and m.cpu_cores >= 1 and m.torch_version and m.command_line == ["pytest"]
    assert m.seeds == {"numpy": 0, "torch": 0} and "host_spec" in m.extra
    cases, samples, skips = run.table("micro_cases"), run.table("micro_samples"), run.table("micro_skips")
    validate_table("micro_cases", cases)
    validate_table("micro_samples", samples)
    validate_table("micro_skips", skips)
    assert set(cases["suite"]) == set(SUITES)
    assert len(samples) == cases["n_samples"].sum()  # every raw sample kept
    assert (cases["median_s"] > 0).all() and (cases["p10_s"] <= cases["median_s"]).all() and (cases["median_s"] <= cases["p90_s"]).all()
    assert ((cases["useful_flops"] > 0) | (cases["useful_bytes"] > 0) | (cases["suite"] == "transfer")).all()
    assert (cases["padded_flops"] >= cases["useful_flops"]).all()


def test_invalid_only_with_above_peak_flag(quick_run):
    cases = quick_run[1].table("micro_cases")
    for _, c in cases.iterrows():
        flags = json.loads(c["flags_json"])
        assert (not c["valid"]) == any(f.startswith("above_peak") for f in flags), c["case_id"]
        assert (not c["unstable"]) or any(f.startswith("unstable") for f in flags)


def test_telemetry_degrades_to_one_note_on_cpu(quick_run):
    m = quick_run[1].manifest
    if m.gpu_name is None:
        assert [n for n in m.notes if n.startswith("telemetry off")] and m.telemetry["samples"] == 0


def test_skips_recorded_with_reasons(quick_run):
    skips = quick_run[1].table("micro_skips")
    assert (skips["reason"].str.len() > 10).all()
    assert ((skips["suite"] == "decode") & skips["reason"].str.contains("numpy")).any()


def test_stage_has_rates_against_the_model(quick_run):
    cases = quick_run[1].table("micro_cases")
    stage = cases[cases.suite == "stage"]
    params = [json.loads(p) for p in stage["params_json"]]
    assert any("r_p_tokens_per_s" in p for p in params) and any("r_d_calls_per_s" in p for p in params)
    for p in params:
        assert p["measured_rate_per_s"] > 0 and p["implied_efficiency"] > 0


def test_moe_padding_recorded(quick_run):
    cases = quick_run[1].table("micro_cases")
    tile = cases[cases.case.str.contains("grouped-power-law-tile")].iloc[0]
    # the quick power-law case is the chapter's [32,16,8,4,2,1,1,0]: 3.5× the useful rows at a 32-row tile
    assert tile.padded_flops / tile.useful_flops == pytest.approx(3.5)
