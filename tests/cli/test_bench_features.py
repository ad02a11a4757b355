"""Issue 49's load features end to end through `harness bench-pd` against the embedded (simulated) target, short runs:
trace replay (BurstGPT, Azure), GPU telemetry from a fake DCGM exporter (and an unreachable one), the engine profile
window, multi-turn sessions carrying the server's replies, and the over-saturation cut of a hopeless step."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "telemetry"))
from fake_dcgm import FakeExporter, closed_port_url  # noqa: E402

from harness.bench.rates import RatePoint, RateSweepResult, run_series, summary_lines, table_lines  # noqa: E402
from harness.cli import main  # noqa: E402
from harness.store import Run  # noqa: E402
from workloads.artifact import load_artifact  # noqa: E402
from workloads.traces import TraceSelection, read_selected  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCEN = str(ROOT / "workloads/scenarios/ch9-hetero-pd.toml")
TRACES = ROOT / "tests" / "data" / "traces"
FAST = ["--scenario", SCEN, "--time-scale", "0.1", "--startup-s", "0", "--quiet"]


def _run(tmp_path, *argv):
    return main(["bench-pd", *FAST, "--out", str(tmp_path / "results"), "--report-dir", str(tmp_path / "reports"), "--json", *argv])


def _res(capsys):
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("name,argv", [("burstgpt_sample.csv", ["--trace-window", "0:120", "--trace-time-scale", "0.02"]),
                                       ("azure_2024_conv_sample.csv", ["--trace-time-scale", "0.5", "--trace-max-rate", "4"])])
def test_a_csv_trace_replays_its_selection(capsys, tmp_path, name, argv):
    rc = _run(tmp_path, "--trace", str(TRACES / name), *argv)
    res = _res(capsys)
    assert rc == 0, res["summary"]["invalid_reasons"]
    art = load_artifact(Path(res["run_dir"]) / "workload-artifact.parquet")
    window = (0.0, 120.0) if "0:120" in argv else None
    sel = read_selected(TRACES / name, selection=TraceSelection(time_scale=0.02 if window else 0.5, window_s=window,
                                                                max_rate_per_s=None if window else 4.0))
    df = Run(res["run_dir"]).table("requests")
    assert len(df) == art.count == len(sel.requests) and set(df["error_class"]) == {"ok"}
    assert sorted(df["max_tokens"]) == sorted(r.output_length for r in sel.requests)
    assert art.meta["trace_format"] == name.split("_")[0]
    assert res["extras"]["trace"]["trace_requests"] == len(sel.requests)
    assert "## Trace replayed" in Path(res["report_paths"][1]).read_text()
    assert art.meta["rate_capped"] is (window is None) and art.meta["replay_mean_rate_per_s"] == pytest.approx(
        sel.meta["replay_mean_rate_per_s"])
    if window is None:  # the Azure sample at twice its speed runs at ~5 req/s: capped to 4, slowed down, no request dropped
        assert art.meta["replay_mean_rate_per_s"] == pytest.approx(4.0) and art.count == 60


@pytest.mark.slow
def test_gpu_telemetry_from_an_exporter_and_an_unreachable_one_keeps_the_run(capsys, tmp_path):
    bad = closed_port_url()
    with FakeExporter(util=64, throttle=True) as ex:
        rc = _run(tmp_path, "--duration-s", "4", "--rate", "3", "--input-tokens", "300", "--output-tokens", "8",
                  "--gpu-metrics-url", f"decode={ex.url}", "--gpu-metrics-url", bad, "--gpu-metrics-interval-s", "0.5")
    cap = capsys.readouterr()
    res = json.loads(cap.out)
    assert rc == 0 and res["summary"]["valid"]  # the unreachable exporter did not fail the run
    assert f"--gpu-metrics-url {bad} (all) gives no GPU sample" in cap.err and "Connection refused" in cap.err
    run = Run(res["run_dir"])
    df = run.table("gpu_metrics")
    ok, failed = df[df["error"].isna()], df[df["error"].notna()]
    assert set(ok["role"]) == {"decode"} and set(ok["gpu"]) == {"0", "1"} and (ok["util_frac"] == 0.64).all()
    assert set(failed["endpoint"]) == {bad} and len(failed) >= 1
    assert df["t_s"].between(-2.0, 30.0).all()  # on the run's time axis
    assert any(f"GPU telemetry from {bad}" in n for n in run.manifest.notes)
    gpu = res["extras"]["gpu"]
    steady = [r for r in gpu["rows"] if r["phase"] == "steady" and r["gpu"] == "1"]
    assert steady and steady[0]["throttle_reasons"] == ["sw_thermal"] and steady[0]["util_mean_frac"] == pytest.approx(0.64)
    md = (Path(res["report_paths"][1])).read_text()
    html = Path(res["report_paths"][0]).read_text()
    assert "## GPU telemetry by phase" in md and "sw_thermal" in md and f"{bad}: " in md
    assert "GPU telemetry (utilisation, SM clock, power, memory used) on the run&#x27;s time axis" in html
    # the report renders the same from the stored run alone
    assert main(["report", res["run_dir"], "--to", str(tmp_path / "again")]) == 0
    assert "## GPU telemetry by phase" in (tmp_path / "again" / "summary.md").read_text()


@pytest.mark.slow
def test_profile_window_is_called_recorded_and_its_trace_named(capsys, tmp_path):
    rc = _run(tmp_path, "--duration-s", "4", "--rate", "3", "--input-tokens", "300", "--output-tokens", "8",
              "--warmup-s", "1", "--profile-window", "0.5:2", "--profile-dir", str(tmp_path / "prof"))
    res = _res(capsys)
    assert rc == 0
    p = json.loads((Path(res["run_dir"]) / "profile.json").read_text())
    assert p["window_s"] == [1.5, 3.0] and p["window_in_measurement_s"] == [0.5, 2.0]
    (start, stop) = p["calls"]
    # never early (a busy host may make them late): sent at or after the window's instants, the stop after the start
    assert start["path"] == "/start_profile" and start["status"] == 200 and start["sent_s"] >= 1.5 - 0.01
    assert stop["path"] == "/stop_profile" and stop["status"] == 200 and stop["sent_s"] >= max(3.0 - 0.01, start["answered_s"])
    trace_file = json.loads(stop["answer"][:stop["answer"].rindex("}") + 1] if stop["answer"].endswith("}") else "{}").get("trace_file")
    assert p["trace"].startswith(str(tmp_path / "prof")) and "SIMULATED" in p["trace"]
    assert trace_file is None or Path(trace_file).is_file()
    assert list((tmp_path / "prof").glob("*.trace.json"))
    assert "## Engine profile window" in Path(res["report_paths"][1]).read_text()


def test_a_trace_with_a_missing_column_is_refused_before_the_run(capsys, tmp_path):
    bad = tmp_path / "burst.csv"
    bad.write_text("Timestamp,Model,Request tokens,Total tokens,Log Type\n1,ChatGPT,5,9,API log\n")
    rc = main(["bench-pd", *FAST, "--out", str(tmp_path / "results"), "--report-dir", "", "--trace", str(bad)])
    err = capsys.readouterr().err
    assert rc == 1 and "missing column(s) 'Response tokens'" in err and "Timestamp,Model,Request tokens,Response tokens" in err
    assert "Traceback" not in err and not (tmp_path / "results").exists()


def test_a_profile_window_outside_the_run_is_refused_before_it(capsys, tmp_path):
    rc = main(["bench-pd", *FAST, "--out", str(tmp_path / "results"), "--report-dir", "", "--duration-s", "4", "--rate", "2",
               "--input-tokens", "50", "--output-tokens", "2", "--profile-window", "2:9"])
    err = capsys.readouterr().err
    assert rc == 1 and "--profile-window 2:9 ends 9 s into the measurement window, but the window is 4 s long" in err
    assert "Traceback" not in err and not (tmp_path / "results").exists()
    rc = main(["bench-pd", *FAST, "--profile-window", "5", "--duration-s", "2"])
    assert rc == 1 and "START:END" in capsys.readouterr().err


@pytest.mark.slow
def test_multi_turn_sessions_carry_the_replies_and_the_engine_reports_the_cached_history(capsys, tmp_path):
    rc = _run(tmp_path, "--duration-s", "2", "--rate", "2", "--input-tokens", "600", "--output-tokens", "8", "--turns", "3",
              "--pause-s", "uniform:min=0.05,max=0.2")
    res = _res(capsys)
    assert rc == 0, res["summary"]["invalid_reasons"]
    df = Run(res["run_dir"]).table("requests").sort_values(["session_id", "turn"])
    assert set(df["error_class"]) == {"ok"} and set(df["turn"]) == {0, 1, 2}
    # the embedded target counts words: the client's prompt length (history with the real replies) is the server's
    assert (df["prompt_tokens_usage"] == df["prompt_tokens_target"]).all()
    t = df.set_index(["session_id", "turn"])
    for s in set(df["session_id"]):
        assert t.loc[(s, 1), "reused_prefix_tokens"] == 600 + 8 and t.loc[(s, 2), "reused_prefix_tokens"] == 1208 + 8
        # its prefix cache keeps whole 512-word blocks of what it already prefilled
        assert t.loc[(s, 1), "cached_tokens_usage"] == 512 and t.loc[(s, 2), "cached_tokens_usage"] == 1024
    reuse = res["extras"]["reuse"]
    assert reuse["replies"] == "live" and reuse["cached_tokens"] == 1536 * reuse["sessions"]
    assert "## Multi-turn prefix reuse" in Path(res["report_paths"][1]).read_text()
    gaps = [(t.loc[(s, 1), "sent_ns"] - t.loc[(s, 0), "last_byte_ns"]) / 1e9 for s in set(df["session_id"])]
    assert min(gaps) >= 0.045  # seeded think times of 50-200 ms after the previous turn ended


@pytest.mark.slow
def test_a_hopeless_step_is_cut_short_and_marked(capsys, tmp_path):
    # 8192-token prompts at 9 req/s against the P pool's ~4.7 req/s (§9.2.3: d_P 0.856 s on A100): the queue grows
    rc = main(["bench-pd", "--scenario", SCEN, "--time-scale", "1", "--startup-s", "0", "--quiet", "--json",
               "--out", str(tmp_path / "results"), "--report-dir", str(tmp_path / "reports"), "--duration-s", "60",
               "--rate", "9", "--input-tokens", "8192", "--output-tokens", "4", "--early-stop"])
    res = _res(capsys)
    assert rc == 1  # the rest of its schedule was not sent: the run says so
    cut = res["extras"]["early_stop"]
    assert cut["oversaturated"] and 20.0 <= cut["t_s"] < 60.0 and cut["in_flight"]["lower_95"] > 0.9  # before the schedule ended
    run = Run(res["run_dir"])
    df = run.table("requests")
    assert (df["error_class"] == "not_sent").sum() > 9 * (60 - cut["t_s"]) / 2 and df["sent_ns"].max() / 1e9 < cut["t_s"] + 5
    assert any("stopped early" in n and "over-saturated" in n for n in run.manifest.notes)
    assert res["summary"]["window_end_s"] == pytest.approx(cut["t_s"])  # its figures cover what it measured
    assert "## Stopped early: over-saturated" in Path(res["report_paths"][1]).read_text()


def test_a_cut_step_fails_and_the_knee_is_the_highest_rate_meeting_the_slos(tmp_path):
    from dataclasses import dataclass, field

    from harness.bench.pd import BenchPdOptions

    @dataclass
    class R:
        run_dir: str
        summary: object
        extras: dict = field(default_factory=dict)
        report_paths: list = field(default_factory=list)

    from types import SimpleNamespace as NS

    def run_one(o):
        r = o.rate_per_s
        pct = NS(p50=0.1 * r, p90=0.2 * r)
        s = NS(valid=r < 8, goodput_fraction=1.0 if r <= 4 else 0.5, invalid_reasons=[] if r < 8 else ["not sent"],
               request_throughput_per_s=min(r, 5.0), request_throughput_incl_drain_per_s=min(r, 5.0), output_tokens_per_s=10 * r,
               goodput_per_s=r, ttft_s=pct, tpot_s=pct, e2e_s=pct, steady=True)
        return R(f"/runs/{r:g}", s, {"early_stop": {"t_s": 23.5, "reason": "grew"}} if r >= 8 else {})

    opts = BenchPdOptions(report_dir=str(tmp_path / "rep"), early_stop=True)
    res = run_series(opts, [2.0, 4.0, 6.0, 8.0], run_one)
    assert res.knee_rate_per_s == 4.0 and res.to_dict()["knee_rate_per_s"] == 4.0
    (p8,) = [p for p in res.points if p.rate_per_s == 8.0]
    assert p8.stopped_early == "over-saturated at 23.5 s" and not p8.passes
    assert "knee (highest rate measured that met the SLOs): 4 req/s" in summary_lines(res)[1]
    assert "1 step(s) cut short as over-saturated (rates 8)" in summary_lines(res)[2]
    assert any("| 8 | NO | no | over-saturated at 23.5 s |" in ln for ln in table_lines(res))
    md = (tmp_path / "rep" / res.group_id / "latency-throughput.md").read_text()
    assert "knee" in md and json.loads((tmp_path / "rep" / res.group_id / "latency-throughput.json").read_text())["knee_rate_per_s"] == 4.0
    none = RateSweepResult("g", "series", [RatePoint(1.0, "r", False, False, 0, 0, 0, None, None, None, None, None, None, None)], {}, 0.9)
    assert none.knee_rate_per_s is None and "knee: no rate tried met the SLOs" in summary_lines(none)[1]
    # every rate met the SLOs: the highest tried is a lower bound, not a knee
    easy = run_series(BenchPdOptions(report_dir=str(tmp_path / "rep2")), [2.0, 4.0], run_one)
    assert easy.knee_rate_per_s == 4.0 and "knee: not found — every rate tried met the SLOs, up to 4 req/s" in summary_lines(easy)[1]
