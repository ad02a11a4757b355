"""Text output of `harness engine` (harness.report.engine), from the use case's records."""

from dataclasses import replace

import pandas as pd

from harness.bench.engine import BenchCheck, EngineCheck
from harness.engines.crosscheck import CrossRow
from harness.engines.launcher import TimeToReady
from harness.engines.session import SessionResult
from harness.report.engine import render_check, render_session
from workloads.summary import summarise


def test_check_line_names_the_processes_and_a_missing_binary():
    c = EngineCheck("cfg.toml", "llama-cpp-gemma3-270m", "llama.cpp", "single", ["server"], "llama-server is not installed")
    assert not c.installed and c.to_dict()["installed"] is False
    assert render_check(c) == ("ok: llama-cpp-gemma3-270m (llama.cpp, mode single): 1 process(es): server\n"
                               "note: llama-server is not installed")


def test_session_summary_with_a_bench_cross_check():
    t = TimeToReady(1.25, 2.5, {"server": 1.25}, 0.125, {})
    res = SessionResult("cfg", "http://127.0.0.1:18080", "results/m/r1", {"name": "llama.cpp", "version": "b1", "served_name": "g"},
                        t, {"server": 12}, {"server": 0}, ["a note"])
    row = CrossRow("output tokens", 320.0, 320.0, 0.0, 0.0, "streamed vs counted")
    summary = replace(summarise(pd.DataFrame(), span_s=1.0), requests_ok=10, requests_total=10, output_tokens_per_s=12.5)
    bc = BenchCheck("chat", "results/m/r2", [], summary, [row])
    text = render_session(res, [bc])
    lines = text.splitlines()
    assert lines[0] == "engine      llama.cpp version b1 (commit unknown)"
    assert "first reply    2.500 s after spawn (time-to-ready; the request took 0.125 s)" in text
    assert "metrics     server: 12 samples" in lines and "note        a note" in lines and "stored      results/m/r1" in lines
    assert "" in lines and "bench-pd (chat): results/m/r2" in lines
    assert "  10 ok of 10, 12.5 output tokens/s" in lines and "output tokens" in lines[-1] and lines[-1].startswith("  ")
    # a bench without --calibration: no prediction for llama.cpp, and not the scenario's GPU plan either
    assert any(ln.startswith("  model: no prediction for this target: ") for ln in lines) and "GPU PD plan" not in text
