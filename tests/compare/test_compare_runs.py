"""compare: synthetic runs with a known shift are detected, runs without one pass; pairing refuses mixed workloads."""

import dataclasses

import numpy as np
import pytest

from harness.compare.compare import CompareOptions, compare_runs
from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run
from harness.errors import HarnessError

LATENCY = [f"{f}_{s}_s" for f in ("ttft", "tpot", "itl", "e2e") for s in ("p50", "p90", "p99")]


def test_no_shift_passes_every_metric(load_runs):
    cmp = compare_runs([load_runs["a"], load_runs["b"]])
    (p,) = cmp.pairs
    assert {m.metric for m in p.metrics} == {*LATENCY, "output_tokens_per_s", "request_throughput_per_s", "goodput_per_s"}
    # p99 of 400 requests rests on its 4 largest: no verdict (ITL pools ~12 000 gaps, so its p99 is judged)
    thin = {m.metric for m in p.metrics if m.verdict == "not enough data"}
    assert thin == {"ttft_p99_s", "tpot_p99_s", "e2e_p99_s"}
    assert "needs >= 1000 samples per run" in p.metric("ttft_p99_s").note
    assert p.counts() == {"no significant change": 12, "not enough data": 3}


def test_ttft_shift_detected_and_located(load_runs):
    (p,) = compare_runs([load_runs["a"], load_runs["slow"]]).pairs
    for name in ("ttft_p50_s", "ttft_p90_s", "e2e_p50_s"):
        assert p.metric(name).verdict == "slower", name
    m = p.metric("ttft_p50_s")
    assert m.delta.ci_low_rel < 0.25 < m.delta.ci_high_rel  # the injected +25 % lies in the interval
    assert m.rank.p_value < 1e-6 and m.rank.prob_b_greater > 0.6
    # nothing about decoding changed
    for name in ("tpot_p50_s", "itl_p50_s", "output_tokens_per_s"):
        assert p.metric(name).verdict == "no significant change", name


def test_faster_itl_is_faster(load_runs):
    (p,) = compare_runs([load_runs["a"], load_runs["fast_itl"]]).pairs
    assert p.metric("itl_p50_s").verdict == "faster"
    assert p.metric("tpot_p50_s").delta.delta_rel == pytest.approx(-0.2, abs=0.03)
    assert p.metric("ttft_p50_s").verdict == "no significant change"


def test_point_values_equal_the_runs_summary(load_runs):
    from harness.store import Run

    (p,) = compare_runs([load_runs["a"], load_runs["b"]]).pairs
    s = Run(load_runs["a"]).json("summary.json")["load"]
    assert p.metric("ttft_p99_s").delta.a_value == pytest.approx(s["ttft_s"]["p99"])
    assert p.metric("itl_p50_s").delta.a_value == pytest.approx(s["itl_s"]["p50"])
    assert p.metric("output_tokens_per_s").delta.a_value == pytest.approx(s["output_tokens_per_s"])
    assert p.metric("request_throughput_per_s").delta.a_value == pytest.approx(s["request_throughput_per_s"])
    assert p.metric("goodput_per_s").delta.a_value == pytest.approx(s["goodput_per_s"])


def test_same_seed_same_result(load_runs):
    o = CompareOptions(seed=3)
    d1 = compare_runs([load_runs["a"], load_runs["slow"]], o).to_dict()
    d2 = compare_runs([load_runs["a"], load_runs["slow"]], o).to_dict()
    assert d1["pairs"][0]["metrics"] == d2["pairs"][0]["metrics"]


def test_different_workload_refused_with_reason_unless_forced(load_runs):
    with pytest.raises(HarnessError) as e:
        compare_runs([load_runs["a"], load_runs["other"]])
    msg = str(e.value)
    assert "workload artifact differs" in msg and "synthetic-wo" in msg and "--force" in msg
    with pytest.raises(HarnessError, match="scenario differs: a has 'synthetic', other_scenario has 'another'"):
        compare_runs([load_runs["a"], load_runs["other_scenario"]])
    (p,) = compare_runs([load_runs["a"], load_runs["other"]], CompareOptions(force=True)).pairs
    assert p.forced_reasons and "workload artifact differs" in p.forced_reasons[0]


def test_sweep_pairs_by_artifact(tmp_path):
    s1 = SyntheticLoad(workload_hash="rate-1", requests=120)
    s2 = SyntheticLoad(workload_hash="rate-2", requests=120, rate_per_s=8.0)
    runs = [write_synthetic_load_run(tmp_path, s1, 1, "a1"), write_synthetic_load_run(tmp_path, s2, 2, "a2"),
            write_synthetic_load_run(tmp_path, s1, 3, "b1"), write_synthetic_load_run(tmp_path, s2, 4, "b2")]
    cmp = compare_runs(runs)
    assert [(p.baseline.run_id, p.candidate.run_id) for p in cmp.pairs] == [("a1", "b1"), ("a2", "b2")]


def test_needs_two_runs_and_one_kind(load_runs, tmp_path):
    with pytest.raises(HarnessError, match="at least two runs"):
        compare_runs([load_runs["a"]])
    from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run

    micro = write_synthetic_run(tmp_path, SyntheticMachine(suites=("gemm",)), seed=0)
    with pytest.raises(HarnessError, match="different kinds"):
        compare_runs([load_runs["a"], micro])
    with pytest.raises(HarnessError, match="not a run directory"):
        compare_runs([load_runs["a"], tmp_path / "nope"])


def test_micro_runs_compare_cases(tmp_path):
    from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run

    base = SyntheticMachine(suites=("transfer",), links=(("pcie", "h2d", "pinned", 10e-6, 50e9),))
    slow = dataclasses.replace(base, links=(("pcie", "h2d", "pinned", 10e-6, 40e9),))  # bandwidth −20 %
    a = write_synthetic_run(tmp_path / "a", base, seed=1)
    b = write_synthetic_run(tmp_path / "b", base, seed=2)
    c = write_synthetic_run(tmp_path / "c", slow, seed=3)
    (same,) = compare_runs([a, b]).pairs
    assert set(same.counts()) == {"no significant change"}
    (p,) = compare_runs([a, c]).pairs
    big = [m for m in p.metrics if m.metric.endswith("/median_s") and "1073741824" in m.metric]
    assert big and big[0].verdict == "slower" and big[0].delta.delta_rel == pytest.approx(0.25, abs=0.03)  # 50/40 − 1
    rates = [m for m in p.metrics if m.metric.endswith("/bytes_per_s") and "1073741824" in m.metric]
    assert rates and rates[0].verdict == "slower" and rates[0].delta.delta_rel == pytest.approx(-0.2, abs=0.03)
    # α-dominated small transfers barely move: no verdict
    tiny = [m for m in p.metrics if m.metric.endswith("/median_s") and m.delta.a_value < 11e-6]
    assert tiny and all(m.verdict == "no significant change" for m in tiny)


def test_interval_coverage_of_a_known_shift_over_seeds(tmp_path):
    # the 95 % interval of ttft_p50 should cover the true +20 % in most of 10 independent pairs
    base = SyntheticLoad(requests=150)
    shifted = dataclasses.replace(base, ttft_median_s=base.ttft_median_s * 1.2)
    hits = 0
    for k in range(10):
        a = write_synthetic_load_run(tmp_path, base, 100 + k, f"a{k}")
        b = write_synthetic_load_run(tmp_path, shifted, 200 + k, f"b{k}")
        m = compare_runs([a, b], CompareOptions(n_boot=400)).pairs[0].metric("ttft_p50_s")
        hits += m.delta.ci_low_rel <= 0.2 <= m.delta.ci_high_rel
    assert hits >= 8
    assert np.isfinite(m.delta.delta_rel)


def test_options_that_differ_are_listed_one_per_row(tmp_path):
    import dataclasses

    from harness.report.compare import render_text
    from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run
    from harness.report.compare import fmt_pair

    base = SyntheticLoad()
    a = write_synthetic_load_run(tmp_path, base, seed=1, run_id="opt-a")
    b = write_synthetic_load_run(tmp_path, dataclasses.replace(base, engine_version="1.1", slo_ttft_s=0.8), seed=2, run_id="opt-b")
    cmp = compare_runs([a, b], CompareOptions(n_boot=200))
    text = render_text(cmp, [], None)
    assert "option engine.version: A 1.0 | B 1.1" in text and "option slo.ttft_s: A 0.5 | B 0.8" in text
    a2 = write_synthetic_load_run(tmp_path, base, seed=3, run_id="opt-a2")
    same = compare_runs([a, a2], CompareOptions(n_boot=200))
    assert "options: the same in both runs" in render_text(same, [], None)
    # one unit per row: 9.5 s and 10.2 s are both shown in seconds, not "9500.00 ms" next to "10.20 s"
    assert fmt_pair(9.5, 10.2, "s") == ("9.50 s", "10.20 s") and fmt_pair(0.0095, 0.0102, "s") == ("9.50 ms", "10.20 ms")
    assert fmt_pair(950.0, 1200.0, "tokens/s") == ("0.95 ktokens/s", "1.2 ktokens/s")


def test_options_list_leaves_out_noise(tmp_path):
    # issue 48 item 10: a relative and an absolute path to one scenario, and the --duration-s of a run that replayed the
    # other's artifact, were listed as differences; a real difference (max_concurrency) still is
    from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run
    from harness.report.compare import render_text

    rel = "workloads/scenarios/ch9-hetero-pd.toml"
    # the embedded target records its scenario path in the engine info too (engine.scenario_path)
    a = write_synthetic_load_run(tmp_path, SyntheticLoad(), seed=1, run_id="noise-a", engine_info={"scenario_path": rel}, options={
        "scenario": rel, "duration_s": 90.0, "rate_per_s": None, "workload_path": None, "max_concurrency": 512,
        "workload": {"input_tokens": None}})
    b = write_synthetic_load_run(tmp_path, SyntheticLoad(), seed=2, run_id="noise-b", engine_info={
        "scenario_path": f"/home/user/llm-dist-harness/{rel}"}, options={
        "scenario": f"/home/user/llm-dist-harness/./{rel}", "duration_s": 60.0, "rate_per_s": None,
        "workload_path": "results/synthetic-load/noise-a/workload.parquet", "max_concurrency": 64,
        "workload": {"input_tokens": 256}})
    text = render_text(compare_runs([a, b], CompareOptions(n_boot=200)), [], None)
    options = [line.strip() for line in text.splitlines() if line.strip().startswith("option")]
    assert options == ["option options.max_concurrency: A 512 | B 64"], options


def test_same_path():
    from harness.compare.runs import same_path

    assert same_path("workloads/s.toml", "/repo/workloads/s.toml") and same_path("./a/b.toml", "a/b.toml")
    assert not same_path("workloads/s.toml", "/repo/other/s.toml") and not same_path("../s.toml", "/x/s.toml")
    assert not same_path("/a/s.toml", "/b/s.toml") and same_path(None, None) and not same_path(None, "a.toml")
    assert not same_path("http://host/a", "http:/host/a")  # URLs compare as text
