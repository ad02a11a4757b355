"""Pure logic of harness.bench.tool_compare: load window, stats, CLI checks, the word tokenizer (the /proc
accounting it uses is tested in tests/telemetry/test_proc.py)."""

from __future__ import annotations

import pytest

from harness.bench import tool_compare as tc
from harness.bench.tool_compare import Sample, best_median, find_load_window, ratios
from harness.errors import HarnessError

# --- load window -------------------------------------------------------------------------------------------------


def S(t, cpu, rec, fin, q=None, cpu_after=None):
    return Sample(t, cpu, rec, fin, None, q, None, None, t + 0.01, cpu if cpu_after is None else cpu_after)


def test_load_window_edges():
    samples = [
        S(0.0, 1.0, 0, 0),
        S(0.1, 1.5, 0, 0),  # start: last sample before a request arrived
        S(0.2, 1.9, 10, 0),
        S(0.3, 2.4, 32, 5),
        S(0.4, 2.9, 32, 32, q=500),  # all finished, bytes still queued
        S(0.5, 3.1, 32, 32, q=0, cpu_after=3.15),  # end
        S(0.6, 9.0, 32, 32, q=0),  # report generation after the load: outside
    ]
    w = find_load_window(samples, 32)
    assert (w.start, w.end) == (1, 5)
    assert w.cpu_s == pytest.approx(3.15 - 1.5)
    assert w.wall_s == pytest.approx(0.51 - 0.1)


def test_load_window_skips_samples_where_the_target_did_not_answer():
    samples = [S(0.0, 1.0, 0, 0), S(0.1, 1.1, None, None), S(0.2, 1.3, 4, 0), S(0.3, 1.6, None, None, q=0),
               S(0.4, 1.8, 4, 4, q=0)]
    w = find_load_window(samples, 4)
    assert (w.start, w.end) == (0, 4)
    assert w.cpu_s == pytest.approx(0.8)


def test_load_window_needs_a_start_and_an_end():
    with pytest.raises(ValueError, match="never received"):
        find_load_window([S(0.0, 1.0, 0, 0), S(0.1, 1.0, 0, 0)], 4)
    with pytest.raises(ValueError, match="no start"):
        find_load_window([S(0.0, 1.0, 2, 0), S(0.1, 1.0, 4, 4, q=0)], 4)
    with pytest.raises(ValueError, match="3 of 4 requests"):
        find_load_window([S(0.0, 1.0, 0, 0), S(0.1, 1.0, 4, 3, q=0)], 4)
    with pytest.raises(ValueError, match="100 bytes queued"):
        find_load_window([S(0.0, 1.0, 0, 0), S(0.1, 1.0, 4, 4, q=100)], 4)


# --- stats and ratios --------------------------------------------------------------------------------------------


def test_best_median():
    assert best_median([3.0, 1.0, 2.0, 10.0]) == {"best": 10.0, "median": 2.5, "n": 4}
    assert best_median([]) == {"best": None, "median": None, "n": 0}


def test_ratios_best_median_and_per_round():
    runs = [
        {"tool": "ours", "round": 1, "k": 200.0}, {"tool": "guidellm", "round": 1, "k": 100.0}, {"tool": "aiperf", "round": 1, "k": 50.0},
        {"tool": "ours", "round": 2, "k": 240.0}, {"tool": "guidellm", "round": 2, "k": 80.0}, {"tool": "aiperf", "round": 2, "k": 120.0},
        {"tool": "ours", "round": 3, "k": 210.0}, {"tool": "guidellm", "round": 3, "k": 90.0}, {"tool": "aiperf", "round": 3, "k": None},
    ]
    r = ratios(runs, "k")
    assert r["per_tool"]["ours"] == {"best": 240.0, "median": 210.0, "n": 3}
    assert r["per_tool"]["aiperf"]["n"] == 2  # a run without a figure is left out
    assert r["best_vs_best"] == {"ratio": pytest.approx(2.0), "vs": "aiperf"}  # 240 / 120
    assert r["median_vs_median"] == {"ratio": pytest.approx(210 / 90), "vs": "guidellm"}  # aiperf median 85 < 90
    assert r["per_round"] == {"1": {"ratio": 2.0, "vs": "guidellm"}, "2": {"ratio": 2.0, "vs": "aiperf"},
                              "3": {"ratio": pytest.approx(210 / 90), "vs": "guidellm"}}


def test_ratios_without_ours_or_others_has_no_ratio():
    assert "best_vs_best" not in ratios([{"tool": "ours", "round": 1, "k": 1.0}], "k")
    assert "best_vs_best" not in ratios([{"tool": "guidellm", "round": 1, "k": 1.0}], "k")


# --- CLI validation ----------------------------------------------------------------------------------------------


def _args(*argv):
    return tc.parser().parse_args(list(argv))


@pytest.mark.parametrize("argv, flag", [
    (["--rounds", "0"], "--rounds"),
    (["--requests", "-3"], "--requests"),
    (["--concurrency", "0"], "--concurrency"),
    (["--output-tokens", "0"], "--output-tokens"),
    (["--sample-interval-s", "0"], "--sample-interval-s"),
    (["--sample-interval-s", "30"], "--sample-interval-s"),
    (["--max-busy-pct", "150"], "--max-busy-pct"),
    (["--quiet-timeout-s", "-1"], "--quiet-timeout-s"),
    (["--guidellm", "/nonexistent/guidellm"], "--guidellm"),
    (["--tools", "ours,vllm"], "--tools"),
    (["--tools", "guidellm"], "--guidellm PATH"),
    (["--out", "/nonexistent-dir/x.json"], "--out"),
])
def test_cli_refuses_bad_input_naming_the_flag(argv, flag):
    with pytest.raises(HarnessError) as e:
        tc.validate(_args(*argv))
    assert flag in str(e.value)


def test_cli_tokenizer_for_other_tools(tmp_path):
    exe = tmp_path / "guidellm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    _, _, tools = tc.validate(_args("--guidellm", str(exe), "--work-dir", str(tmp_path / "w")))  # none given: one is written
    assert tools.tokenizer == str((tmp_path / "w" / "tokenizer").resolve()) and (tmp_path / "w" / "tokenizer" / "tokenizer.json").is_file()
    with pytest.raises(HarnessError, match="no tokenizer.json"):
        tc.validate(_args("--guidellm", str(exe), "--tokenizer", str(tmp_path)))
    (tmp_path / "tokenizer.json").write_text("{}")
    chosen, wl, tools = tc.validate(_args("--guidellm", str(exe), "--tokenizer", str(tmp_path), "--tools", "guidellm,ours"))
    assert chosen == ["ours", "guidellm"]  # fixed round-robin order
    assert tools.guidellm == str(exe.resolve()) and wl.tokens == 256 * 4096


def test_cli_defaults_run_ours_only():
    chosen, wl, tools = tc.validate(_args())
    assert chosen == ["ours"] and tools.guidellm is None and (wl.requests, wl.output_tokens, wl.concurrency) == (256, 4096, 32)


def test_main_reports_a_bad_flag_as_an_error(capsys):
    assert tc.main(["--rounds", "0"]) == 1
    assert "--rounds must be > 0" in capsys.readouterr().err


def test_word_tokenizer_counts_one_token_per_word_like_the_target(tmp_path):
    import json

    from tokenizers import Tokenizer

    from workloads.prompts import synthetic_words

    d = tc.write_word_tokenizer(tmp_path / "tok")
    assert json.loads((d / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    tk = Tokenizer.from_file(str(d / "tokenizer.json"))
    text = synthetic_words(128, seed=3)
    enc = tk.encode(text)
    assert len(enc.ids) == 128 and 0 not in enc.ids  # every prompt word is in the vocabulary: no [UNK]
    assert tk.decode(enc.ids) == text


# --- against the one-token-per-write server, with a fake tool ------------------------------------------------------


def test_token_server_option_runs_a_tool_and_checks_its_counts(tmp_path):
    import json
    import sys
    from pathlib import Path

    fake = tmp_path / "guidellm"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / 'fake_guidellm.py'} \"$@\"\n")
    fake.chmod(0o755)
    out = tmp_path / "cmp.json"
    rc = tc.main(["--server", "token", "--server-itl-s", "0.001", "--guidellm", str(fake), "--tools", "guidellm",
                  "--requests", "4", "--output-tokens", "30", "--concurrency", "2", "--quiet-timeout-s", "0",
                  "--sample-interval-s", "0.05", "--work-dir", str(tmp_path / "w"), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["workload"]["server"] == "token" and "one send per token" in res["workload"]["target"]
    (run,) = res["runs"]
    assert run["server"] == "token" and run["problems"] == [], run["problems"]
    assert run["target"] == {"requests_received": 4, "requests_finished": 4, "tokens_generated": 120}
    assert run["tool_report"]["all_output_tokens_as_asked"] is True
    assert run["load_window"]["cpu_s"] > 0 and run["tokens_per_cpu_s_load_window"] > 0


@pytest.mark.parametrize("argv, flag", [(["--server", "token", "--server-itl-s", "-1"], "--server-itl-s"),
                                        (["--server", "token", "--server-cpu", "999"], "--server-cpu"),
                                        (["--server-cpu", "0"], "--server token")])
def test_token_server_flags_are_checked(argv, flag):
    with pytest.raises(HarnessError) as e:
        tc.validate(_args(*argv))
    assert flag in str(e.value)


# --- --mode light: client TTFT minus the server's own TTFT -------------------------------------------------------


def test_light_pairs_by_response_id_and_by_quantile():
    from harness.bench.tool_compare.light import client_minus_server, server_ttft_ms

    log = {"request_ids": ["a", "b"], "arrival_ns": [0, 1_000_000_000], "request_index": [0, 0, 1, 1],
           "token_index": [0, 1, 0, 1], "emit_ns": [100_000_000, 120_000_000, 1_102_000_000, 1_122_000_000]}
    srv = server_ttft_ms(log)
    assert srv == {"a": 100.0, "b": 102.0}
    m = client_minus_server([("a", 101.0), ("b", 104.0)], srv)
    assert m["matched_ms"]["p50"] == pytest.approx(1.5) and m["matched_ms"]["max"] == pytest.approx(2.0)
    assert m["matched_share"] == 1.0
    q = client_minus_server([(None, 101.0), (None, 104.0)], srv)  # no ids: quantile - the server's median (101)
    assert "matched_ms" not in q and q["by_quantile_ms"]["p50"] == pytest.approx(1.5) and q["by_quantile_ms"]["n"] == 2


def test_light_summary_takes_the_median_over_rounds():
    runs = [{"tool": "ours", "round": i, "problems": [], "light": {"matched_ms": {"p50": p, "p90": p, "p99": 2 * p}}}
            for i, p in ((1, 0.8), (2, 1.0), (3, 0.9))]
    runs.append({"tool": "aiperf", "round": 1, "problems": [], "light": {"by_quantile_ms": {"p50": 0.7, "p90": 1.0, "p99": 2.0}}})
    s = tc.summarise(runs)["light_client_minus_server_ttft_ms"]
    assert s["ours"]["p50"] == pytest.approx(0.9) and s["ours"]["p99"] == pytest.approx(1.8) and s["ours"]["runs"] == 3
    assert s["aiperf"]["pairing"] == "by_quantile_ms" and s["ours"]["pairing"] == "matched_ms"


@pytest.mark.parametrize("argv, word", [(["--mode", "light", "--server", "target"], "--server target"),
                                        (["--rate-per-s", "2"], "--mode light"),
                                        (["--mode", "light", "--rate-per-s", "0"], "--rate-per-s"),
                                        (["--mode", "light", "--concurrency", "8"], "--concurrency")])
def test_light_flags_are_checked(argv, word):
    with pytest.raises(HarnessError) as e:
        tc.validate(_args(*argv))
    assert word in str(e.value)


def test_light_defaults():
    _, wl, _ = tc.validate(_args("--mode", "light"))
    assert (wl.requests, wl.input_tokens, wl.output_tokens, wl.rate_per_s) == (300, 64, 50, 2.0)


@pytest.mark.slow
def test_light_mode_runs_ours_and_a_tool_against_the_emit_log(tmp_path):
    import json
    import sys
    from pathlib import Path

    fake = tmp_path / "guidellm"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / 'fake_guidellm.py'} \"$@\"\n")
    fake.chmod(0o755)
    out = tmp_path / "light.json"
    rc = tc.main(["--mode", "light", "--guidellm", str(fake), "--requests", "8", "--rate-per-s", "8",
                  "--output-tokens", "5", "--quiet-timeout-s", "0", "--sample-interval-s", "0.05",
                  "--work-dir", str(tmp_path / "w"), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["mode"] == "light" and "--ttft-s 0.1 --itl-s 0.02" in res["workload"]["target"]
    for run in res["runs"]:
        assert run["problems"] == [], run["problems"]
        lt = run["light"]
        assert lt["matched_share"] == 1.0 and lt["matched_ms"]["n"] == 8
        assert 99.0 < lt["server_ttft_ms"]["p50"] < 150.0  # the server's fixed 100 ms TTFT
        assert 0.0 < lt["matched_ms"]["p50"] < 50.0  # the client adds something, far less than the TTFT
    s = res["summary"]["light_client_minus_server_ttft_ms"]
    assert set(s) == {"ours", "guidellm"}


def test_light_reads_each_tools_per_request_ttfts(tmp_path):
    """The shapes of guidellm 0.8.1's out.json and AIPerf 0.13.0's profile_export.jsonl, as they wrote them here."""
    import json

    from harness.bench.tool_compare.adapters import ADAPTERS

    (tmp_path / "out.json").write_text(json.dumps({"benchmarks": [{"requests": {"successful": [
        {"response_id": "cmpl-1", "time_to_first_token_ms": 101.5, "output_tokens": 50},
        {"response_id": "cmpl-2", "time_to_first_token_ms": None}]}}]}))
    assert ADAPTERS["guidellm"].ttfts_ms(tmp_path, "") == [("cmpl-1", 101.5)]
    art = tmp_path / "artifacts" / "x"
    art.mkdir(parents=True)
    recs = [{"metadata": {"x_request_id": "a"}, "metrics": {"time_to_first_token": {"value": 101.2, "unit": "ms"}}},
            {"metadata": {"x_request_id": "b"}, "metrics": {"request_latency": {"value": 9.0, "unit": "ms"}}},
            {"metadata": {}, "metrics": {"time_to_first_token": {"value": 5.0, "unit": "ms"}}, "error": {"code": 500}}]
    (art / "profile_export.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert ADAPTERS["aiperf"].ttfts_ms(tmp_path, "") == [(None, 101.2)]  # no TTFT or an error: left out
