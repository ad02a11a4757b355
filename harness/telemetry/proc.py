"""/proc accounting: process CPU (one process or a whole process tree), loopback socket queues, machine busy-ness.

Linux only (reads /proc); every reader degrades to "unavailable" rather than raising when a process vanishes.
Used by harness.bench.tool_compare (client CPU per streamed token, by process tree; socket queues to tell when
a client has read every byte) and offered to the CPU engine loop (`process_cpu_s`, one process, all threads).

* `/proc/<pid>/stat`: `parse_proc_stat` (the command name may hold spaces and ')'), `read_proc_stats`,
  `process_cpu_s` (utime + stime of one process), `ProcessTreeCpu` (a command's whole tree, children found by
  ppid, re-parented and orphaned members kept).
* `/proc/net/tcp`: `parse_proc_net_tcp`, `socket_queues` (Send-Q + Recv-Q as `ss -tn` shows them).
* `/proc/stat`: `parse_cpu_line`, `busy_pct`, `wait_quiet` (wait for a quiet machine before a measurement).
* an engine's CPU share while it had work: `busy_union_s` (the union of its requests' [send, last byte]),
  `engine_cpu_share` (CPU seconds / (busy seconds × threads)), judged against harness.loop_records.stages.CONTENDED_SHARE
  (the loop, bench-pd).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

CLK_TCK = os.sysconf("SC_CLK_TCK")
LISTEN_STATE = 0x0A  # TCP_LISTEN in /proc/net/tcp: its queue counts connections waiting for accept(), not bytes


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    own_ticks: int  # utime + stime
    children_ticks: int  # cutime + cstime: descendants this process has reaped

    @property
    def total_ticks(self) -> int:
        return self.own_ticks + self.children_ticks


def parse_proc_stat(text: str) -> ProcStat:
    """One `/proc/<pid>/stat` line. The command name may hold spaces and ')', so split after the last ')'."""
    head, sep, tail = text.rpartition(")")
    if not sep or "(" not in head:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    pid = int(head.split("(", 1)[0])
    f = tail.split()
    # f[0] = state (field 3), f[1] = ppid (4), f[11..14] = utime, stime, cutime, cstime (14..17)
    if len(f) < 15:
        raise ValueError(f"/proc/{pid}/stat has {len(f) + 2} fields, expected at least 17")
    return ProcStat(pid, int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))


def read_proc_stats(pids: Iterable[int] | None = None, proc: str = "/proc") -> dict[int, ProcStat]:
    """Stat of the given pids (None: of every process) that still exist."""
    out: dict[int, ProcStat] = {}
    for pid in (int(n) for n in os.listdir(proc) if n.isdigit()) if pids is None else pids:
        try:
            with open(f"{proc}/{pid}/stat") as fh:
                out[pid] = parse_proc_stat(fh.read())
        except (OSError, ValueError):  # vanished between listdir and open
            continue
    return out


class ProcessTreeCpu:
    """CPU ticks of a process tree over time, from successive snapshots of every process's stat.

    A process joins the tree when its ppid is a member; it stays a member while it lives even if re-parented.
    A member that vanishes while its parent (a member) lives was reaped by it, so its time is already in the
    parent's cutime/cstime. A member that vanishes after being orphaned (its ppid no longer a member) was reaped
    outside the tree: its last figure is kept in `orphaned_ticks`.
    """

    def __init__(self, root_pid: int, read_stats: Callable[[Iterable[int] | None], dict[int, ProcStat]] = read_proc_stats):
        self.root_pid = root_pid
        self.read_stats = read_stats
        self.members: set[int] = {root_pid}
        self.seen: set[int] = {root_pid}  # every pid that was ever a member
        self.last: dict[int, ProcStat] = {}
        self.orphaned_ticks = 0

    def update(self, stats: dict[int, ProcStat], *, members_only: bool = False) -> int:
        """Fold one snapshot in (of every process, or `members_only`: of the members only, which finds no new
        children); returns the tree's total ticks."""
        grew = not members_only
        while grew:  # a child may appear with its own child in the same snapshot
            new = {p for p, s in stats.items() if p not in self.members and s.ppid in self.members}
            self.members |= new
            self.seen |= new
            grew = bool(new)
        for pid in list(self.members):
            if pid in stats:
                self.last[pid] = stats[pid]
                continue
            prev = self.last.pop(pid, None)
            self.members.discard(pid)
            if prev is not None and not (prev.ppid in self.members and prev.ppid in stats):
                self.orphaned_ticks += prev.total_ticks
        return self.orphaned_ticks + sum(self.last[p].total_ticks for p in self.members if p in self.last)

    def sample_s(self, *, full: bool = True) -> float:
        """Total CPU seconds now; `full=False` reads only the known members (cheaper: no scan of /proc)."""
        if full:
            return self.update(self.read_stats(None)) / CLK_TCK
        return self.update(self.read_stats(sorted(self.members)), members_only=True) / CLK_TCK


def parse_proc_net_tcp(text: str, port: int, exclude_ports: Iterable[int] = ()) -> tuple[int, int, int]:
    """(Send-Q bytes, Recv-Q bytes, connections) over the non-listening sockets of `/proc/net/tcp` with `port`
    at either end, as `ss -tn` shows them (tx_queue, rx_queue). Sockets with a port in `exclude_ports` at either
    end (both sides of the sampler's own connection: its server side keeps the last answer in Send-Q until the
    sampler's delayed ACK) are left out.
    """
    skip = set(exclude_ports)
    send_q = recv_q = conns = 0
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 5:
            continue
        lport = int(f[1].rsplit(":", 1)[1], 16)
        rport = int(f[2].rsplit(":", 1)[1], 16)
        if int(f[3], 16) == LISTEN_STATE or port not in (lport, rport) or lport in skip or rport in skip:
            continue
        tx, rx = f[4].split(":")
        send_q, recv_q, conns = send_q + int(tx, 16), recv_q + int(rx, 16), conns + 1
    return send_q, recv_q, conns


def parse_cpu_line(text: str) -> tuple[int, int]:
    """(busy, total) jiffies from the aggregate `cpu` line of /proc/stat (idle = idle + iowait)."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            v = [int(x) for x in f[1:9]]  # user nice system idle iowait irq softirq steal
            total = sum(v)
            return total - v[3] - v[4], total
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def busy_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    d_busy, d_total = after[0] - before[0], after[1] - before[1]
    return 100.0 * d_busy / d_total if d_total > 0 else 0.0


def process_cpu_s(pid: int | None, proc: str = "/proc") -> float | None:
    """CPU seconds (user + system, all threads) a process has used itself, from /proc; None where unavailable."""
    if pid is None:
        return None
    try:
        with open(f"{proc}/{pid}/stat") as fh:
            return parse_proc_stat(fh.read()).own_ticks / CLK_TCK
    except (OSError, ValueError):
        return None


def busy_union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals (seconds): how long an engine had work."""
    tot, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def engine_cpu_share(cpu_s: float | None, busy_s: float, threads: int) -> float | None:
    """The share of its `threads` cores an engine process got while it had work: CPU seconds / (busy seconds × threads)."""
    if cpu_s is None or busy_s <= 0 or threads < 1:
        return None
    return cpu_s / (busy_s * threads)


def socket_queues(port: int, *, ipv6: bool = False, exclude_ports: Iterable[int] = (), proc: str = "/proc") -> tuple[int, int, int]:
    """(Send-Q + Recv-Q bytes, Recv-Q bytes, connections) of the sockets with `port` at either end, from
    /proc/net/tcp (tcp6 with `ipv6`); zeros where the file cannot be read."""
    try:
        with open(f"{proc}/net/{'tcp6' if ipv6 else 'tcp'}") as fh:
            sq, rq, c = parse_proc_net_tcp(fh.read(), port, exclude_ports)
    except OSError:
        return 0, 0, 0
    return sq + rq, rq, c


def wait_quiet(max_loadavg: float, max_busy_pct: float, timeout_s: float) -> dict[str, Any]:
    """Wait until the 1-minute load average < max_loadavg and the CPUs were < max_busy_pct busy over 3 s."""
    t0 = time.monotonic()
    while True:
        with open("/proc/stat") as fh:
            a = parse_cpu_line(fh.read())
        time.sleep(3.0)
        with open("/proc/stat") as fh:
            b = parse_cpu_line(fh.read())
        la, busy = os.getloadavg()[0], busy_pct(a, b)
        quiet = la < max_loadavg and busy < max_busy_pct
        waited = time.monotonic() - t0
        if quiet or waited >= timeout_s:
            return {"loadavg_1m": round(la, 2), "busy_pct_3s": round(busy, 1), "waited_s": round(waited, 1), "quiet": quiet}
