"""`harness bench-pd` load options end to end against the embedded (simulated) target, short runs at time-scale 0.1:
each workload flag lands in the stored artifact and the requests sent, closed loop and rate series/search work,
a closed port fails the pre-flight (or, without it, makes an INVALID run), and exit codes say so."""

import json
import math
from pathlib import Path

import pytest

from harness.cli import main
from harness.store import Run
from workloads.artifact import load_artifact

ROOT = Path(__file__).resolve().parents[2]
SCEN = str(ROOT / "workloads/scenarios/ch9-hetero-pd.toml")
DATA = ROOT / "tests" / "data" / "datasets"
FAST = ["--scenario", SCEN, "--time-scale", "0.1", "--startup-s", "0", "--quiet"]


def _run(tmp_path, *argv, json_out=True):
    rc = main(["bench-pd", *FAST, "--out", str(tmp_path / "results"), "--report-dir", str(tmp_path / "reports"),
               *(["--json"] if json_out else []), *argv])
    return rc


def _single(capsys):
    return json.loads(capsys.readouterr().out)


def test_closed_port_fails_the_preflight_naming_the_url(capsys, tmp_path):
    rc = _run(tmp_path, "--target", "http://127.0.0.1:9", "--duration-s", "2", json_out=False)
    err = capsys.readouterr().err
    assert rc == 1 and "pre-flight" in err and "http://127.0.0.1:9/v1/models" in err and "Connection refused" in err
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_all_failed_run_is_invalid_and_exits_1(capsys, tmp_path):
    rc = _run(tmp_path, "--target", "http://127.0.0.1:9", "--duration-s", "1", "--no-preflight", "--input-tokens", "8",
              "--output-tokens", "2", json_out=False)
    cap = capsys.readouterr()
    assert rc == 1 and "INVALID" in cap.err and "sent requests failed (100%" in cap.err and "connect" in cap.err
    run = Run(next((tmp_path / "results").glob("*/*/manifest.json")).parent)
    assert set(run.table("requests")["error_class"]) == {"connect"}


@pytest.mark.parametrize("argv,needle", [
    (["--warmup-s", "100", "--duration-s", "2"], "leave no measurement window"),
    (["--concurrency", "2", "--rate", "3"], "exclude each other"),
    (["--rate", "1,x"], "--rate '1,x'"),
    (["--input-tokens", "normal:mean=5"], "needs mean=M,stdev=S"),
    (["--dataset", "someorg/somedata"], "hub name"),
])
def test_bad_load_options_are_refused(capsys, tmp_path, argv, needle):
    rc = _run(tmp_path, *argv, json_out=False)
    err = capsys.readouterr().err
    assert rc == 1 and needle in err and "Traceback" not in err


@pytest.mark.slow
def test_synthetic_flags_reach_the_artifact_and_the_server(capsys, tmp_path):
    rc = _run(tmp_path, "--duration-s", "2", "--rate", "3", "--input-tokens", "normal:mean=300,stdev=50,min=200,max=400",
              "--output-tokens", "uniform:min=4,max=8", "--prefix-tokens", "100", "--turns", "2", "--pause-s", "0.2")
    res = _single(capsys)
    assert rc == 0, res
    run = Run(res["run_dir"])
    art = load_artifact(Path(res["run_dir"]) / "workload-artifact.parquet")  # the replayable artifact is kept in the run
    spec = art.meta["workload_spec"]
    assert spec["input_tokens"]["kind"] == "normal" and spec["prefix_tokens"] == 100 and spec["turns"] == 2
    df = run.table("requests")
    assert len(df) == art.count == 12 and set(df["error_class"]) == {"ok"}
    assert df["max_tokens"].between(4, 8).all() and (df["output_tokens_usage"] == df["max_tokens"]).all()
    # the embedded target counts one token per word: its usage equals the client's count
    assert (df["prompt_tokens_usage"] == df["prompt_tokens_target"]).all()
    t0 = df[df["turn"] == 0].set_index("session_id")
    t1 = df[df["turn"] == 1].set_index("session_id")
    gap_s = (t1["sent_ns"] - t0.loc[t1.index, "last_byte_ns"]) / 1e9
    assert len(t1) == 6 and (gap_s >= 0.19).all()  # each later turn waits --pause-s after the previous turn ended
    assert res["summary"]["prompt_tokens_client_vs_usage"]["differing"] == 0


@pytest.mark.slow
def test_dataset_tokenizer_trace_and_closed_loop(capsys, tmp_path):
    rc = _run(tmp_path, "--duration-s", "2", "--rate", "3", "--dataset", str(DATA / "sharegpt.json"), "--tokenizer",
              str(DATA / "tokenizer"), "--output-tokens", "3")
    res = _single(capsys)
    assert rc == 0
    df = Run(res["run_dir"]).table("requests")
    assert set(df["error_class"]) == {"ok"} and len(df) == 6
    # client counts (the fixture tokenizer) next to the server's (words): recorded, and they differ
    assert res["summary"]["prompt_tokens_client_vs_usage"]["differing"] > 0

    rc = _run(tmp_path, "--trace", str(ROOT / "workloads/traces/mooncake-sample.jsonl"), "--trace-time-scale", "0.05",
              "--duration-s", "2", "--mix", "mooncake")
    res = _single(capsys)
    assert rc == 0
    df = Run(res["run_dir"]).table("requests")
    assert len(df) == 40 and set(df["error_class"]) == {"ok"}
    assert df["intended_ns"].max() / 1e9 == pytest.approx((25281 - 777) / 1000 * 0.05, rel=1e-6)

    rc = _run(tmp_path, "--concurrency", "3", "--num-requests", "9", "--duration-s", "30", "--input-tokens", "64",
              "--output-tokens", "4")
    res = _single(capsys)
    assert rc == 0
    run = Run(res["run_dir"])
    assert run.manifest.extra["load_mode"] == "closed-loop" and res["summary"]["load_mode"] == "closed-loop"
    df = run.table("requests")
    assert len(df) == 9 and set(df["error_class"]) == {"ok"}


@pytest.mark.slow
def test_rate_series_and_search(capsys, tmp_path):
    rc = _run(tmp_path, "--rate", "2,4", "--duration-s", "2", "--input-tokens", "64", "--output-tokens", "4")
    res = _single(capsys)
    assert rc == 0 and [p["rate_per_s"] for p in res["points"]] == [2.0, 4.0]
    groups = {Run(p["run_dir"]).manifest.extra["run_group"]["id"] for p in res["points"]}
    assert groups == {res["group_id"]}
    assert any(p.endswith("latency-throughput.md") for p in res["report_paths"])
    rc = _run(tmp_path, "--rate", "auto", "--auto-start", "2", "--auto-max-steps", "2", "--duration-s", "2",
              "--input-tokens", "64", "--output-tokens", "4", "--slo-ttft-s", "30")
    res = _single(capsys)
    assert rc == 0 and res["mode"] == "auto" and len(res["points"]) == 2
    assert [p["rate_per_s"] for p in res["points"]] == [2.0, 4.0]  # 2 passed (a generous SLO), so it doubled
    assert res["best_rate_per_s"] == 4.0 and "bound of 2 runs" in res["stop_reason"]
    assert not math.isnan(res["points"][0]["request_throughput_incl_drain_per_s"])
