"""`harness sweep`: bad input prints `error: ...` and exits 1 naming the flag; a small embedded sweep prints its verdict."""

import pytest

from harness.cli import main

EMBEDDED = "embedded,scenario=workloads/scenarios/ch9-hetero-pd.toml,startup_s=0,time_scale=0.1"


@pytest.mark.parametrize("argv,match", [
    (["--target", EMBEDDED, "--lambda", "-1"], "--lambda must be a finite number >= 0"),
    (["--target", EMBEDDED, "--sla-s", "0"], "--sla-s must be a positive number"),
    (["--target", EMBEDDED, "--grid", "mode"], "--grid 'mode': write KEY=V1,V2"),
    (["--target", EMBEDDED, "--grid", "colour=red,blue"], "no setting 'colour'"),
    (["--target", "http://127.0.0.1:9", "--grid", "llama_cpp.parallel=1,2"], "URL is a server already running"),
    (["--target", "no-such-engine", "--grid", "llama_cpp.parallel=1,2"], "engine config 'no-such-engine' does not exist"),
    (["--target", EMBEDDED, "--warmup-s", "30"], "--warmup-s must be in"),
    (["--target", EMBEDDED, "--output-tokens", "0"], "--output-tokens must be an integer >= 1"),
])
def test_errors_name_the_flag(argv, match, capsys, tmp_path):
    assert main(["sweep", *argv, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and "Traceback" not in err


def test_one_point_prints_best_and_front(capsys, tmp_path):
    rc = main(["sweep", "--target", EMBEDDED, "--grid", "mode=pd", "--rate", "2", "--duration-s", "5", "--input-tokens", "1024",
               "--output-tokens", "4", "--out", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "time in simulated seconds, time_scale 0.1" in out
    assert "best: mode=pd (reward" in out and "pareto front (throughput vs p95 ttft): mode=pd" in out
