"""`harness compare`: exit 0 without a breach, 3 on one, 1 on user errors (never a traceback); the report is written."""

import dataclasses
import json

import pytest

from harness.cli import main
from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    base = SyntheticLoad(requests=200)
    return {
        "a": write_synthetic_load_run(d, base, seed=1, run_id="a", label="engine v1"),
        "b": write_synthetic_load_run(d, base, seed=2, run_id="b", label="engine v1 again"),
        "slow": write_synthetic_load_run(d, dataclasses.replace(base, ttft_median_s=0.3), seed=3, run_id="slow", label="engine v2"),
        "other": write_synthetic_load_run(d, dataclasses.replace(base, workload_hash="other-hash"), seed=4, run_id="other"),
    }


def test_no_shift_exit_0_and_report(runs, tmp_path, capsys):
    out = tmp_path / "rep"
    rc = main(["compare", str(runs["a"]), str(runs["b"]), "--fail-on", "ttft_p90_s:30%,output_tokens_per_s:-3%", "--to", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "B b (engine v1 again) vs A a (engine v1)" in text
    assert "verdicts: no significant change 12, not enough data 3" in text  # p99 of 200 requests is not judged
    assert "gate ttft_p90_s:+30% [pass]" in text and f"report: {out / 'index.html'}" in text
    html = (out / "index.html").read_text()
    md = (out / "summary.md").read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    for fig in ("cdfs", "latency-vs-throughput", "forest-1"):
        assert (out / "figures" / f"{fig}.png").read_bytes().startswith(b"\x89PNG")
        assert f"figures/{fig}.png" in md
    assert "| ttft_p99_s |" in md


def test_breach_exit_3_names_the_metric(runs, tmp_path, capsys):
    rc = main(["compare", str(runs["a"]), str(runs["slow"]), "--fail-on", "ttft_p50_s:5%", "--no-report"])
    cap = capsys.readouterr()
    assert rc == 3
    assert "gate ttft_p50_s:+5% [breach]" in cap.out
    assert cap.err.startswith("error: 1 gate(s) breached: ttft_p50_s: +")
    assert "Traceback" not in cap.err


def test_unchecked_gate_exit_1(runs, capsys):
    # a p99 gate on 200 requests cannot be checked: exit 1 (broken), not 0 (a silent pass) nor 3
    rc = main(["compare", str(runs["a"]), str(runs["slow"]), "--fail-on", "ttft_p99_s:5%", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: 1 gate(s) could not be checked: ttft_p99_s: cannot be checked: p99 needs >= 1000")


def test_gate_wider_than_its_bound_is_inconclusive_exit_4(runs, tmp_path, capsys):
    # issue 48 item 9: the same distributions, p90 over 200 requests: the interval (about ±10 %) is wider than a 5 % bound,
    # so the runs cannot tell whether TTFT p90 rose by more than 5 %; that is not a pass
    out = tmp_path / "rep"
    rc = main(["compare", str(runs["a"]), str(runs["b"]), "--fail-on", "ttft_p90_s:5%", "--to", str(out)])
    cap = capsys.readouterr()
    assert rc == 4
    assert "gate ttft_p90_s:+5% [inconclusive]" in cap.out and "[pass]" not in cap.out
    assert cap.err.startswith("error: 1 gate(s) inconclusive: ttft_p90_s: ")
    assert "requests per run (now 200) would narrow it enough to pass" in cap.err
    assert "INCONCLUSIVE (needs about" in (out / "summary.md").read_text()


def test_typo_in_a_gate_metric_is_refused_before_the_comparison(runs, capsys, monkeypatch):
    # issue 48 item 9: `ttft_p90:5%` was refused only after the whole bootstrap had run
    import harness.cli.compare as compare_mod  # the verb's module binds compare_loaded

    def not_reached(*a, **k):
        raise AssertionError("the comparison ran before the gate's metric was checked")

    monkeypatch.setattr(compare_mod, "compare_loaded", not_reached)
    rc = main(["compare", str(runs["a"]), str(runs["b"]), "--fail-on", "ttft_p90:5%", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: --fail-on: no compared metric matches 'ttft_p90'. Did you mean ttft_p90_s?")


def test_compare_engines_refuses_a_typo_before_running_engines(capsys, monkeypatch):
    import harness.cli.compare_engines as ce  # the verb's module binds compare_engines

    monkeypatch.setattr(ce, "compare_engines", lambda *a, **k: (_ for _ in ()).throw(AssertionError("engines ran")))
    rc = main(["compare-engines", "--a", "embedded", "--b", "embedded", "--fail-on", "tpot_p5O_s:5%"])
    assert rc == 1 and "no compared metric matches 'tpot_p5O_s'. Did you mean tpot_p50_s?" in capsys.readouterr().err


def test_json_output(runs, capsys):
    rc = main(["compare", str(runs["a"]), str(runs["slow"]), "--json", "--no-report", "--fail-on", "tpot_p50_s:5%"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["breached"] is False and data["report"] is None
    m = {x["metric"]: x for x in data["pairs"][0]["metrics"]}
    assert m["ttft_p50_s"]["verdict"] == "slower" and m["ttft_p50_s"]["p_value"] < 1e-6
    assert data["gates"][0]["status"] == "pass"


def test_refused_then_forced(runs, capsys):
    assert main(["compare", str(runs["a"]), str(runs["other"]), "--no-report"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: these runs are not of the same workload") and "other-hash" in err and "--force" in err
    assert main(["compare", str(runs["a"]), str(runs["other"]), "--no-report", "--force"]) == 0
    assert "FORCED: workload artifact differs" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--fail-on", "ttft_p99_s:5"], "error: --fail-on: cannot read 'ttft_p99_s:5' (the percent sign is required)"),
    (["--fail-on", "ttft_p95_s:5%"], "error: --fail-on: no compared metric matches 'ttft_p95_s'"),
    (["--bootstrap", "10"], "error: --bootstrap must be an integer in [100, 100000]"),
    (["--min-effect", "150%"], "error: --min-effect must be a fraction in [0, 1)"),
])
def test_bad_options_exit_1(runs, capsys, argv, match):
    assert main(["compare", str(runs["a"]), str(runs["b"]), "--no-report", *argv]) == 1
    assert capsys.readouterr().err.startswith(match)


def test_missing_run_exit_1(runs, tmp_path, capsys):
    assert main(["compare", str(runs["a"]), str(tmp_path / "nope")]) == 1
    assert "is not a directory; give results/<machine>/<run_id>/" in capsys.readouterr().err


def test_report_renderer_registered(runs, tmp_path):
    from harness.report import RENDERERS

    assert RENDERERS["compare"] == "harness.report.compare:render"
    from harness.report.compare import render

    paths = render([runs["a"], runs["slow"]], tmp_path / "r")
    assert any(p.name == "index.html" for p in paths)
