"""harness.telemetry.proc: /proc/<pid>/stat parsing, process-tree CPU, /proc/net/tcp socket queues, /proc/stat."""

from __future__ import annotations

import pytest

from harness.telemetry import proc
from harness.telemetry.proc import ProcessTreeCpu, ProcStat, busy_pct, parse_cpu_line, parse_proc_net_tcp, parse_proc_stat

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
        return snap((10, 1, proc.CLK_TCK * 2, 0), (11, 10, proc.CLK_TCK, 0))

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


# --- one process's CPU (the engine loop's figure) and socket queues through a /proc root -------------------------


def test_process_cpu_s_of_this_process_matches_process_time():
    import os
    import time

    t = time.process_time()
    while time.process_time() - t < 0.2:  # burn a little CPU so the figure is not zero
        pass
    got = proc.process_cpu_s(os.getpid())
    assert got is not None and abs(got - time.process_time()) < 0.1  # /proc counts in ticks of 1/CLK_TCK s
    assert proc.process_cpu_s(None) is None


def test_process_cpu_s_of_a_vanished_process_is_none(tmp_path):
    assert proc.process_cpu_s(4242, proc=str(tmp_path)) is None
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text(STAT.format(ut=150, st=50, cut=7, cst=3))
    assert proc.process_cpu_s(4242, proc=str(tmp_path)) == pytest.approx(200 / proc.CLK_TCK)


def test_socket_queues_reads_tcp_or_tcp6_under_the_proc_root(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(NET)
    assert proc.socket_queues(8080, proc=str(tmp_path)) == (0x100 + 0x700 + 0x10, 0x10, 3)
    assert proc.socket_queues(8080, exclude_ports={0xD000}, proc=str(tmp_path)) == (0x100 + 0x10, 0x10, 2)
    assert proc.socket_queues(8080, ipv6=True, proc=str(tmp_path)) == (0, 0, 0)  # no tcp6 file: nothing read
