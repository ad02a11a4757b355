"""Pure logic of workloads.bench.tool_compare: /proc parsing, process-tree CPU, load window, stats, CLI checks."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from workloads.bench import tool_compare as tc
from workloads.bench.tool_compare import (ProcessTreeCpu, ProcStat, Sample, best_median, busy_pct, find_load_window,
                                          parse_cpu_line, parse_proc_net_tcp, parse_proc_stat, ratios)

# --- /proc/<pid>/stat --------------------------------------------------------------------------------------------

STAT = ("4242 (python3 -m x) S 4200 4242 4200 0 -1 4194560 1000 20 0 0 {ut} {st} {cut} {cst} 20 0 3 0 123 456 789 "
        "18446744073709551615 0 0 0 0 0 0 0 16781312 0 0 0 17 1 0 0 0 0 0")


def test_parse_proc_stat_fields():
    s = parse_proc_stat(STAT.format(ut=150, st=30, cut=7, cst=3))
    assert (s.pid, s.ppid, s.own_ticks, s.children_ticks, s.total_ticks) == (4242, 4200, 180, 10, 190)


def test_parse_proc_stat_name_with_parens_and_spaces():
    text = "77 (a) b (c) R 1 77 77 0 -1 0 0 0 0 0 5 6 7 8 20 0 1 0 0 0 0"
    s = parse_proc_stat(text)
    assert (s.pid, s.ppid, s.own_ticks, s.children_ticks) == (77, 1, 11, 15)


def test_parse_proc_stat_rejects_garbage():
    with pytest.raises(ValueError):
        parse_proc_stat("no parens here")
    with pytest.raises(ValueError):
        parse_proc_stat("1 (x) S 0 1")


# --- process tree CPU --------------------------------------------------------------------------------------------


def snap(*rows: tuple[int, int, int, int]) -> dict[int, ProcStat]:
    return {pid: ProcStat(pid, ppid, own, ch) for pid, ppid, own, ch in rows}


def test_tree_finds_grandchildren_and_ignores_strangers():
    t = ProcessTreeCpu(10, read_stats=lambda pids: {})
    # 10 -> 11 -> 12 (grandchild listed before its parent's parent), 99 is not ours
    total = t.update(snap((12, 11, 5, 0), (99, 1, 1000, 0), (10, 1, 100, 0), (11, 10, 20, 0)))
    assert total == 125
    assert t.members == {10, 11, 12}


def test_tree_child_reaped_by_member_is_not_double_counted():
    t = ProcessTreeCpu(10, read_stats=lambda pids: {})
    assert t.update(snap((10, 1, 100, 0), (11, 10, 40, 0))) == 140
    # 11 exited and was reaped by 10: its 50 ticks (40 + 10 more before exiting) moved into 10's cutime
    assert t.update(snap((10, 1, 110, 50))) == 160
    assert t.orphaned_ticks == 0


def test_tree_orphan_reaped_outside_keeps_its_last_figure():
    t = ProcessTreeCpu(10, read_stats=lambda pids: {})
    t.update(snap((10, 1, 100, 0), (11, 10, 10, 0), (12, 11, 30, 0)))
    # 11 died without reaping 12 (not waited for: its time is lost to the tree); 12 re-parented to init
    assert t.update(snap((10, 1, 100, 0), (12, 1, 35, 0))) == 135
    assert 12 in t.members  # membership is sticky across re-parenting
    # 12 exits and init reaps it: its last figure is kept
    assert t.update(snap((10, 1, 101, 0))) == 136
    assert t.orphaned_ticks == 35


def test_tree_members_only_snapshot_finds_no_new_children():
    t = ProcessTreeCpu(10, read_stats=lambda pids: {})
    t.update(snap((10, 1, 100, 0)))
    assert t.update(snap((10, 1, 101, 0), (11, 10, 50, 0)), members_only=True) == 101
    assert t.update(snap((10, 1, 101, 0), (11, 10, 50, 0))) == 151


def test_tree_sample_reads_through_the_callable():
    calls = []

    def read(pids):
        calls.append(None if pids is None else sorted(pids))
        return snap((10, 1, tc.CLK_TCK * 2, 0), (11, 10, tc.CLK_TCK, 0))

    t = ProcessTreeCpu(10, read_stats=read)
    assert t.sample_s() == pytest.approx(3.0)
    assert t.sample_s(full=False) == pytest.approx(3.0)
    assert calls == [None, [10, 11]]


def test_tree_of_a_real_process_counts_its_grandchild():
    import os
    import signal
    import subprocess
    import sys
    import time

    burn = "import time\\nt=time.process_time()\\nwhile time.process_time()-t<0.4: pass\\ntime.sleep(20)"
    code = f"import subprocess,sys,time\nsubprocess.Popen([sys.executable,'-c','{burn}'])\ntime.sleep(20)"
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        t = ProcessTreeCpu(p.pid)
        deadline = time.monotonic() + 15
        cpu = 0.0
        while time.monotonic() < deadline and cpu < 0.4:
            cpu = t.sample_s()
            time.sleep(0.05)
        assert cpu >= 0.4
        assert len(t.seen) == 2
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


# --- /proc/net/tcp, /metrics, /proc/stat -------------------------------------------------------------------------

NET = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000005 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000100:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000010 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 0100007F:1F91 0100007F:C351 01 00000FFF:00000FFF 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
   4: 0100007F:1F90 0100007F:D000 01 00000700:00000000 00:00000000 00000000     0        0 5 1 0 20 4 30 10 -1
"""


def test_parse_proc_net_tcp_sums_both_ends_of_the_port_skipping_listen_and_others():
    # port 0x1F90 = 8080: rows 1 (Send-Q 0x100), 2 (Recv-Q 0x10), 4 (Send-Q 0x700); row 0 listens, row 3 other port
    assert parse_proc_net_tcp(NET, 8080) == (0x100 + 0x700, 0x10, 3)


def test_parse_proc_net_tcp_excludes_the_samplers_own_connection_at_either_end():
    assert parse_proc_net_tcp(NET, 8080, exclude_ports={0xD000}) == (0x100, 0x10, 2)
    assert parse_proc_net_tcp(NET, 8080, exclude_ports={0xC350}) == (0x700, 0, 1)
    assert parse_proc_net_tcp(NET, 9999) == (0, 0, 0)


def test_cpu_busy_from_proc_stat():
    a = parse_cpu_line("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n")
    b = parse_cpu_line("cpu  130 0 60 950 60 0 0 0 0 0\n")
    assert a == (150, 1000)
    # 40 busy of 200 jiffies
    assert busy_pct(a, b) == pytest.approx(20.0)
    assert busy_pct(a, a) == 0.0
    with pytest.raises(ValueError):
        parse_cpu_line("intr 1 2 3\n")


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
