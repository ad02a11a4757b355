"""`harness bench-pd`: bad input refused with `error: ...` and exit 1; a short run against the embedded
(simulated) target writes a run to results/ and a labelled report to reports/."""

import json
from pathlib import Path

import pytest

from harness.cli import main


@pytest.mark.parametrize("argv,msg", [
    (["--target", "ftp://example.com"], "not an http(s) URL"),
    (["--target", "example.com:8000"], "not an http(s) URL"),
    (["--duration-s", "0"], "--duration-s"),
    (["--rate", "-1"], "--rate"),
    (["--scenario", "workloads/scenarios/nope.toml"], "does not exist"),
    (["--prefill-metrics-url", "gopher://x"], "prefill-metrics-url"),
])
def test_bad_input_is_refused(capsys, tmp_path, argv, msg):
    rc = main(["bench-pd", *argv, "--out", str(tmp_path / "r"), "--report-dir", str(tmp_path / "p"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: ") and msg in err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_short_run_against_the_embedded_target(capsys, tmp_path, request):
    scen = request.config.rootpath / "workloads/scenarios/ch9-hetero-pd.toml"
    rc = main(["bench-pd", "--scenario", str(scen), "--duration-s", "3", "--rate", "4", "--time-scale", "0.1", "--startup-s", "0.5",
               "--out", str(tmp_path / "results"), "--report-dir", str(tmp_path / "reports"), "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out)
    assert res["target"] == "simulated (embedded)"
    run_dir = Path(res["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["engine"]["simulated"] is True
    assert manifest["engine"]["prefill_gpus"] == ["a100-80gb-sxm"] * 4
    assert (run_dir / "plan.json").is_file() and (run_dir / "requests").is_dir() and (run_dir / "server_metrics").is_dir()
    s = res["summary"]
    assert s["requests_total"] >= 8 and s["errors_by_class"] == {"ok": s["requests_total"]}
    # time-scale 0.1: TTFT ≥ 0.1 × (0.856 s prefill + 48.3 ms transfer), chapter 9 §9.2.3
    assert s["ttft_s"]["p50"] >= 0.1 * 0.9046 * 0.99
    html, md = (Path(p) for p in res["report_paths"])
    text = html.read_text()
    assert "SIMULATED" in text and text.count("data:image/png;base64,") == 4
    assert "| request throughput (window) |" in md.read_text() and "SIMULATED" in md.read_text()
    # the embedded target is the scenario's deployment: its prediction is the plan, as before; no twin is involved
    # --rate 4 against the scenario's 3.5 req/s: the model column says it is not this run's prediction
    assert "| quantity | measured | model (Chapter 9, for 3.5 req/s, not this run's) |" in md.read_text() and "μ_PD" in md.read_text()
    assert res["prediction"] is None and not (run_dir / "prediction.json").exists()


def test_empty_make_variables_mean_not_given():
    from harness.cli import build_parser

    args = build_parser().parse_args(["bench-pd", "--target", "", "--prefill-metrics-url", "", "--rate", "", "--duration-s", ""])
    assert args.target == "" and args.rate is None and args.duration_s is None


@pytest.mark.slow
def test_text_output_shows_progress_and_ends_saying_simulated(capsys, tmp_path, request):
    from harness.bench.progress import SIMULATED_NOTE

    scen = request.config.rootpath / "workloads/scenarios/ch9-hetero-pd.toml"
    rc = main(["bench-pd", "--scenario", str(scen), "--duration-s", "2", "--rate", "4", "--time-scale", "0.1", "--startup-s", "0",
               "--out", str(tmp_path / "results"), "--report-dir", ""])
    cap = capsys.readouterr()
    assert rc == 0
    assert cap.out.splitlines()[-1] == SIMULATED_NOTE
    err = cap.err.splitlines()  # no terminal: plain progress lines, then the final one
    assert any("in flight" in ln and "ETA" in ln for ln in err)
    assert err[-1].startswith("load: ") and err[-1].endswith(SIMULATED_NOTE)


def test_an_unwritable_report_dir_is_refused_before_the_run(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    rc = main(["bench-pd", "--duration-s", "5", "--out", str(tmp_path / "results"), "--report-dir", str(tmp_path / "file" / "sub")])
    assert rc == 1
    assert "--report-dir" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # nothing was run


STEP_TIME_STUB = '{"format": "harness-step-time", "format_version": 1}'


@pytest.mark.parametrize("argv,files,msg", [
    (["--calibration", "{d}/missing.json"], {}, "--calibration '{d}/missing.json' does not exist; give the twin.json"),
    (["--calibration", "{d}/bad.json"], {"bad.json": "{nope"}, "is not valid JSON"),
    (["--calibration", "{d}/list.json"], {"list.json": "[]"}, "holds a JSON list, not an object"),
    (["--calibration", "{d}/other.json"], {"other.json": '{"a": 1}'}, "neither a twin.json"),
    (["--calibration", "{d}/st.json"], {"st.json": STEP_TIME_STUB}, "give --engine-config NAME, the llama.cpp engine config"),
    (["--calibration", "{d}/st.json", "--engine-config", "vllm-qwen3-8b"], {"st.json": STEP_TIME_STUB},
     "--engine-config 'vllm-qwen3-8b' is for 'vllm'"),
    (["--calibration", "{d}/st.json", "--engine-config", "nope"], {"st.json": STEP_TIME_STUB}, "engine config 'nope' does not exist"),
    (["--engine-config", "llama-cpp-gemma3-270m"], {}, "--engine-config qualifies --calibration FILE"),
    (["--proxy"], {}, "--proxy qualifies --calibration FILE"),
    (["--calibration", "{d}/x.json", "--concurrency", "2"], {}, "the twin simulates open-loop arrivals; --concurrency"),
])
def test_a_bad_calibration_is_refused_before_the_run(capsys, tmp_path, argv, files, msg):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = [a.format(d=tmp_path) for a in argv]
    rc = main(["bench-pd", "--target", "http://127.0.0.1:9", *argv, "--out", str(tmp_path / "r"), "--report-dir", "", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: ") and msg.format(d=tmp_path) in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()  # nothing was run


def test_a_calibration_needs_a_real_target(capsys, tmp_path):
    rc = main(["bench-pd", "--calibration", str(tmp_path / "twin.json"), "--out", str(tmp_path / "r"), "--report-dir", ""])
    err = capsys.readouterr().err
    assert rc == 1 and "--calibration predicts a real target: give --target URL" in err
    assert not (tmp_path / "r").exists()


def test_empty_make_calibration_means_not_given():
    from harness.cli import build_parser

    args = build_parser().parse_args(["bench-pd", "--calibration", ""])
    assert args.calibration == "" and args.engine_config is None and args.proxy is False
