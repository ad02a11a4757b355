"""Client CPU per streamed token: our load generator against guidellm (and AIPerf), same machine, same target.

Method (docs/loadgen-speed.md, "Comparison with guidellm, AIPerf, inference-perf"):

* Workload for every tool: the embedded target in its fixed-timing profile (`python -m harness.target
  --profile fixed --ttft-s 0 --itl-s 0`: each stream written whole, one token per SSE event, `usage` in the
  last chunk), started fresh for each run on 127.0.0.1; streaming `/v1/completions`, prompt 128 tokens,
  output 4096 tokens, concurrency 32, 256 requests = 1,048,576 streamed tokens (all configurable).
* The tool's command runs as a child of this process. Every ~0.1 s a sampler
  1. sums utime+stime+cutime+cstime (`/proc/<pid>/stat`) over the command's whole process tree (children
     found through the ppid field of every `/proc/<pid>/stat`; a process once in the tree stays in it, and
     one that was orphaned and then vanished keeps its last figure, so no CPU is lost to re-parenting);
  2. reads the target's counters: `/harness/info` (requests received) and `/metrics`
     (`vllm:request_success_total`, `vllm:generation_tokens_total`);
  3. sums the bytes queued (Recv-Q + Send-Q, as `ss -tn` shows them) in every loopback TCP socket to or
     from the target's port, from `/proc/net/tcp` (the sampler's own connection excluded);
  4. reads the tree's CPU again.
* **Load window**: from the last sample before the target received its first request (CPU read before the
  counters) to the first sample at which every request had finished and no byte was left in any socket
  queue, i.e. the client had read every event (CPU read after the queues). Window CPU is thus never
  under-counted; the sampling step bounds the over-count.
* **Whole command**: the rusage of the command and its reaped descendants from exec to exit (`wait4`):
  imports, data generation, tokenizer loading, the load, post-processing and reports.
* Tokens per client CPU second = tokens / CPU s, tokens = requests x output tokens, checked on the target
  (`vllm:generation_tokens_total`, `vllm:request_success_total`) and in each tool's own report where it has one.
  For ours the in-process figure (`summary.json` -> `client_process`, load process + part writer) is
  reported next to the sampler's.
* Before every run the sampler waits (up to `--quiet-timeout-s`) until the 1-minute load average is below
  `--max-loadavg` and the CPUs are less than `--max-busy-pct` busy over 3 s (`/proc/stat`); it records what it
  found and whether it ever got quiet.
* `--rounds N` runs the tools round-robin (ours, guidellm, aiperf), N times; the JSON holds every run, best
  and median per tool, and ours / best other (best vs best, median vs median, and per round).

Run: .venv/bin/python -m workloads.bench.tool_compare --guidellm /tmp/venv-guidellm/bin/guidellm \
         --aiperf /tmp/venv-aiperf/bin/aiperf --rounds 4 --out /tmp/tool_compare.json
(the tools in their own virtualenvs: `pip install torch==2.13.0 guidellm==0.8.1`, `pip install aiperf==0.13.0`;
without --tokenizer a word-level one is written with write_word_tokenizer).
Tools whose executable is not given are skipped; ours always runs unless `--tools` leaves it out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from harness.errors import HarnessError
from harness.records import cpu_model
from harness.telemetry.prometheus import parse_text

REPO_ROOT = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOOLS = ("ours", "guidellm", "aiperf")
LISTEN_STATE = 0x0A  # TCP_LISTEN in /proc/net/tcp: its queue counts connections waiting for accept(), not bytes


# ---------------------------------------------------------------------------------------------------------------
# pure parsing and accounting


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


@dataclass
class Sample:
    t_before_s: float  # monotonic, when cpu_before_s was read
    cpu_before_s: float
    requests_received: int | None  # None: the target did not answer
    requests_finished: int | None
    tokens_generated: int | None
    queued_bytes: int | None  # Send-Q + Recv-Q; None: not read (only read once every request has finished)
    recv_q_bytes: int | None
    connections: int | None
    t_after_s: float
    cpu_after_s: float


@dataclass(frozen=True)
class LoadWindow:
    start: int  # sample index
    end: int
    cpu_s: float
    wall_s: float


def find_load_window(samples: list[Sample], n_requests: int) -> LoadWindow:
    """From the last sample before the target received a request to the first one at which all `n_requests`
    had finished and no byte was queued. Raises ValueError when the samples do not show both edges."""
    first = next((i for i, s in enumerate(samples) if s.requests_received), None)
    if first is None:
        raise ValueError("the target never received a request while the command was sampled")
    start = next((i for i in range(first - 1, -1, -1) if samples[i].requests_received == 0), None)
    if start is None:
        raise ValueError("the target had already received requests at the first sample: the load window has no start")
    end = next((i for i in range(first, len(samples))
                if (samples[i].requests_finished or 0) >= n_requests and samples[i].queued_bytes == 0), None)
    if end is None:
        last = samples[-1]
        raise ValueError(f"the load never finished while sampled: {last.requests_finished} of {n_requests} requests "
                         f"finished and {last.queued_bytes} bytes queued at the last sample")
    a, b = samples[start], samples[end]
    return LoadWindow(start, end, b.cpu_after_s - a.cpu_before_s, b.t_after_s - a.t_before_s)


def best_median(values: list[float]) -> dict[str, float | None]:
    return {"best": max(values) if values else None, "median": statistics.median(values) if values else None,
            "n": len(values)}


def ratios(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """ours / best other tool on `key` (a tokens-per-CPU-second figure): best vs best, median vs median, per round."""
    by_tool: dict[str, list[float]] = {}
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        v = r.get(key)
        if v is None:
            continue
        by_tool.setdefault(r["tool"], []).append(v)
        by_round.setdefault(r["round"], {})[r["tool"]] = v
    stats = {t: best_median(v) for t, v in by_tool.items()}
    others = [t for t in stats if t != "ours"]
    out: dict[str, Any] = {"per_tool": stats}
    if "ours" not in stats or not others:
        return out
    for which in ("best", "median"):
        other = max(others, key=lambda t: stats[t][which])
        out[f"{which}_vs_{which}"] = {"ratio": stats["ours"][which] / stats[other][which], "vs": other}
    per_round = {}
    for rnd, vals in sorted(by_round.items()):
        o = [(v, t) for t, v in vals.items() if t != "ours"]
        if "ours" in vals and o:
            v, t = max(o)
            per_round[str(rnd)] = {"ratio": vals["ours"] / v, "vs": t}
    out["per_round"] = per_round
    return out


# ---------------------------------------------------------------------------------------------------------------
# the machine, the target, the commands


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


class TargetPoller:
    """Counters of the target over one keep-alive connection, and the socket queues on its port."""

    def __init__(self, url: str):
        host_port = url.split("://", 1)[1].rstrip("/")
        host, port = host_port.rsplit(":", 1)
        self.host, self.port = host.strip("[]"), int(port)
        self.conn: http.client.HTTPConnection | None = None

    def _get(self, path: str) -> bytes:
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=5.0)
                self.conn.request("GET", path)
                return self.conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def counters(self) -> tuple[int | None, int | None, int | None]:
        try:
            info = json.loads(self._get("/harness/info"))
            m = {x.name: x.value for x in parse_text(self._get("/metrics").decode())}
        except (OSError, http.client.HTTPException, ValueError):
            return None, None, None
        return (int(info["requests_total"]), int(m.get("vllm:request_success_total", 0)),
                int(m.get("vllm:generation_tokens_total", 0)))

    def queues(self) -> tuple[int, int, int]:
        """(Send-Q + Recv-Q, Recv-Q, connections) on the target's port, IPv4 and IPv6."""
        own = {self.conn.sock.getsockname()[1]} if self.conn is not None and self.conn.sock is not None else set()
        tot = [0, 0, 0]
        for path in ("/proc/net/tcp6",) if ":" in self.host else ("/proc/net/tcp",):
            try:
                with open(path) as fh:
                    sq, rq, c = parse_proc_net_tcp(fh.read(), self.port, own)
            except OSError:
                continue
            tot = [tot[0] + sq + rq, tot[1] + rq, tot[2] + c]
        return tot[0], tot[1], tot[2]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def run_sampled(cmd: list[str], *, cwd: Path, env: dict[str, str], log_dir: Path, poller: TargetPoller, n_requests: int,
                interval_s: float, timeout_s: float) -> dict[str, Any]:
    """Run `cmd` to its end while sampling its process tree's CPU and the target; returns samples and rusage."""
    import subprocess

    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "stdout.txt", "wb") as out, open(log_dir / "stderr.txt", "wb") as err:
        t_start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
    tree = ProcessTreeCpu(proc.pid)
    samples: list[Sample] = []
    sampler_cpu0 = time.process_time()
    status = rusage = None
    timed_out = False
    next_t = time.monotonic()
    try:
        while True:
            t_a, c_a = time.monotonic(), tree.sample_s()
            rec, fin, tok = poller.counters()
            # /proc/net/tcp costs ~5 ms of kernel time per read: read it only when the queues decide the window's end
            q, rq, n = poller.queues() if fin is not None and fin >= n_requests else (None, None, None)
            samples.append(Sample(t_a, c_a, rec, fin, tok, q, rq, n, time.monotonic(), tree.sample_s(full=False)))
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, rusage = st, ru
                break
            if time.monotonic() - t_start > timeout_s:
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            next_t += interval_s
            time.sleep(max(0.0, next_t - time.monotonic()))
    finally:
        if status is None:  # interrupted: stop the command we started, by its own process group
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t_start
    return {"samples": samples, "returncode": proc.returncode, "timed_out": timed_out, "wall_s": wall,
            "rusage_cpu_s": rusage.ru_utime + rusage.ru_stime, "rusage_max_rss_kib": rusage.ru_maxrss,
            "tree_cpu_s_at_exit": samples[-1].cpu_after_s, "orphaned_cpu_s": tree.orphaned_ticks / CLK_TCK,
            "processes_seen": len(tree.seen), "sampler_cpu_s": time.process_time() - sampler_cpu0}


@dataclass(frozen=True)
class Workload:
    requests: int = 256
    input_tokens: int = 128
    output_tokens: int = 4096
    concurrency: int = 32

    @property
    def tokens(self) -> int:
        return self.requests * self.output_tokens


@dataclass
class Tools:
    guidellm: str | None = None
    aiperf: str | None = None
    tokenizer: str | None = None
    python: str = sys.executable
    extra_env: dict[str, str] = field(default_factory=lambda: {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                                                "HF_DATASETS_OFFLINE": "1"})


def _command(tool: str, url: str, wl: Workload, tools: Tools, run_dir: Path) -> tuple[list[str], Path]:
    """(argv, cwd) of one tool's run against `url`; prepares what the command reads (config, artifact)."""
    if tool == "ours":
        from workloads.artifact import save_artifact
        from workloads.config import LoadConfig
        from workloads.mixes import single_turn
        from workloads.schedule import burst

        art = single_turn("cmp", burst(wl.requests, 1e-9, 1.0), input_tokens=wl.input_tokens,
                          output_tokens=wl.output_tokens, api="completions")
        run_id = f"cmp-{run_dir.name}-{time.strftime('%Y%m%dT%H%M%S')}"  # run directories are never overwritten
        cfg = LoadConfig(target_url=url, artifact_path=str(save_artifact(art, run_dir)), run_id=run_id,
                         results_dir=str(run_dir / "results"), model="harness-fixed", fetch_emit_log=False,
                         max_concurrency=wl.concurrency, progress=False, request_timeout_s=120.0, drain_timeout_s=120.0)
        return [tools.python, "-m", "workloads.loadrun", str(cfg.save(run_dir / "load-config.json"))], REPO_ROOT
    if tool == "guidellm":
        return [tools.guidellm or "guidellm", "run",
                "--backend", f"kind=openai_http,target={url},model=harness-fixed,request_format=/v1/completions",
                "--profile", f"kind=concurrent,streams={wl.concurrency}",
                "--constraint", f"kind=max_requests,count={wl.requests}",
                "--data", f"kind=synthetic_text,prompt_tokens={wl.input_tokens},output_tokens={wl.output_tokens}",
                "--tokenizer", f"kind=huggingface_auto,model={tools.tokenizer}",
                "--output", f"kind=json,path={run_dir / 'out.json'}", "--disable-console-interactive"], run_dir
    if tool == "aiperf":
        return [tools.aiperf or "aiperf", "profile", "--model", "harness-fixed", "--url", url,
                "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tools.tokenizer),
                "--isl", str(wl.input_tokens), "--isl-stddev", "0", "--osl", str(wl.output_tokens), "--osl-stddev", "0",
                "--concurrency", str(wl.concurrency), "--request-count", str(wl.requests), "--use-server-token-count",
                "--ui-type", "none", "--artifact-dir", str(run_dir / "artifacts"), "--no-server-metrics",
                "--no-gpu-telemetry"], run_dir
    raise HarnessError(f"unknown tool {tool!r}; give one of {', '.join(TOOLS)}.")


def tool_report(tool: str, run_dir: Path, stdout: str, wl: Workload) -> dict[str, Any]:
    """What the tool itself says it did: requests completed and output tokens per request, where readable."""
    try:
        if tool == "ours":
            from harness.store import Run

            line = [ln for ln in stdout.splitlines() if ln.startswith('{"run_dir"')][-1]
            run = Run(json.loads(line)["run_dir"])
            df = run.table("requests")
            ok = df[df["error_class"] == "ok"]
            cp = run.json("summary.json")["client_process"]
            chunks = int(ok["output_tokens_chunks"].sum())
            return {"requests_ok": int(len(ok)), "requests": int(len(df)), "chunks_recorded": chunks,
                    "all_output_tokens_as_asked": bool((ok["output_tokens_chunks"] == wl.output_tokens).all()),
                    "client_process": cp}
        if tool == "guidellm":
            out_toks = _guidellm_output_tokens(json.loads((run_dir / "out.json").read_text()))
            return {"requests_ok": len(out_toks),
                    "all_output_tokens_as_asked": bool(out_toks) and all(t == wl.output_tokens for t in out_toks),
                    "output_tokens_seen": sorted(set(out_toks))[:5]}
        if tool == "aiperf":
            files = sorted((run_dir / "artifacts").rglob("profile_export_aiperf.json"))
            if not files:
                return {"note": "no profile_export_aiperf.json found"}
            data = json.loads(files[-1].read_text())
            rc = data.get("request_count", {})
            osl = data.get("output_sequence_length", {})
            return {"requests_ok": rc.get("avg"), "output_tokens_min": osl.get("min"), "output_tokens_max": osl.get("max"),
                    "all_output_tokens_as_asked": osl.get("min") == osl.get("max") == wl.output_tokens}
    except (OSError, ValueError, KeyError, IndexError) as exc:
        return {"note": f"the tool's report could not be read: {type(exc).__name__}: {exc}"}
    return {}


def _guidellm_output_tokens(data: Any) -> list[Any]:
    """Output tokens of each successful request in a guidellm JSON report (benchmarks[*].requests.successful[*])."""
    out = []
    for b in data.get("benchmarks", []) if isinstance(data, dict) else []:
        for r in ((b.get("requests") or {}).get("successful") or []) if isinstance(b, dict) else []:
            if isinstance(r, dict):
                out.append(r.get("output_tokens"))
    return out


def one_run(tool: str, rnd: int, wl: Workload, tools: Tools, work_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from harness.target.process import start_target

    run_dir = work_dir / f"r{rnd}-{tool}"
    run_dir.mkdir(parents=True, exist_ok=True)
    quiet = wait_quiet(args.max_loadavg, args.max_busy_pct, args.quiet_timeout_s)
    rec: dict[str, Any] = {"tool": tool, "round": rnd, "start_conditions": quiet, "run_dir": str(run_dir)}
    print(f"[tool_compare] round {rnd} {tool}: load {quiet['loadavg_1m']} busy {quiet['busy_pct_3s']} % "
          f"(waited {quiet['waited_s']} s{'' if quiet['quiet'] else ', never quiet'})", file=sys.stderr, flush=True)
    with start_target(["--profile", "fixed", "--ttft-s", "0", "--itl-s", "0"], max_lifetime_s=args.run_timeout_s + 120) as t:
        cmd, cwd = _command(tool, t.url, wl, tools, run_dir)
        rec["command"] = cmd
        env = {**os.environ, **tools.extra_env}
        if tool == "aiperf":
            # AIPerf 0.13.0 in offline mode looks a local tokenizer directory up as a hub cache entry and fails
            # ("Repo id must be in the form ..."); without it, a local path is loaded directly (nothing is fetched)
            for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
                env.pop(k, None)
        rec["env_offline"] = {k: env.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        poller = TargetPoller(t.url)
        try:
            res = run_sampled(cmd, cwd=cwd, env=env, log_dir=run_dir, poller=poller,
                              n_requests=wl.requests, interval_s=args.sample_interval_s, timeout_s=args.run_timeout_s)
            target_final = poller.counters()
        finally:
            poller.close()
    samples = res.pop("samples")
    (run_dir / "samples.json").write_text(json.dumps([asdict(s) for s in samples]))
    rec.update(res)
    rec["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    rec["target"] = {"requests_received": target_final[0], "requests_finished": target_final[1],
                     "tokens_generated": target_final[2]}
    stdout = (run_dir / "stdout.txt").read_text(errors="replace")
    rec["tool_report"] = tool_report(tool, run_dir, stdout, wl)
    problems = []
    if res["returncode"] != 0:
        problems.append(f"exit code {res['returncode']} (see {run_dir}/stderr.txt)")
    if target_final[1] != wl.requests or target_final[2] != wl.tokens:
        problems.append(f"target finished {target_final[1]} requests / {target_final[2]} tokens, "
                        f"expected {wl.requests} / {wl.tokens}")
    if rec["tool_report"].get("all_output_tokens_as_asked") is False:
        problems.append("the tool reported output token counts other than asked")
    try:
        w = find_load_window(samples, wl.requests)
        rec["load_window"] = {"cpu_s": w.cpu_s, "wall_s": w.wall_s, "samples": [w.start, w.end],
                              "tokens_per_cpu_s": wl.tokens / w.cpu_s if w.cpu_s > 0 else None}
    except ValueError as exc:
        rec["load_window"] = None
        problems.append(f"no load window: {exc}")
    rec["whole_command"] = {"cpu_s": res["rusage_cpu_s"], "wall_s": res["wall_s"],
                            "tokens_per_cpu_s": wl.tokens / res["rusage_cpu_s"] if res["rusage_cpu_s"] > 0 else None}
    rec["tokens_per_cpu_s_load_window"] = (rec["load_window"] or {}).get("tokens_per_cpu_s")
    rec["tokens_per_cpu_s_whole_command"] = rec["whole_command"]["tokens_per_cpu_s"]
    if tool == "ours" and "client_process" in rec["tool_report"]:
        cp = rec["tool_report"]["client_process"]
        rec["in_process"] = {"cpu_s": cp["cpu_s"], "part_writer_cpu_s": cp.get("part_writer_cpu_s"), "tokens_per_cpu_s": wl.tokens / cp["cpu_s"] if cp["cpu_s"] else None,
                             "sampler_over_in_process": (rec["load_window"] or {}).get("cpu_s", 0.0) / cp["cpu_s"] if cp["cpu_s"] else None}
    rec["problems"] = problems
    lw = rec["load_window"] or {}
    print(f"[tool_compare] round {rnd} {tool}: window {lw.get('cpu_s', float('nan')):.2f} CPU s / {lw.get('wall_s', float('nan')):.2f} s "
          f"-> {(lw.get('tokens_per_cpu_s') or 0) / 1e3:.1f} k tok/CPU s; whole {res['rusage_cpu_s']:.2f} CPU s"
          + (f"; PROBLEMS: {problems}" if problems else ""), file=sys.stderr, flush=True)
    return rec


# ---------------------------------------------------------------------------------------------------------------
# CLI


def _positive(flag: str, value: float, *, integer: bool = False, low: float = 0.0) -> None:
    if integer and (isinstance(value, bool) or int(value) != value):
        raise HarnessError(f"{flag} must be a whole number, got {value!r}; give e.g. {flag} 4.")
    if not value > low:
        raise HarnessError(f"{flag} must be > {low:g}, got {value!r}; give a positive value.")


def _executable(flag: str, value: str | None) -> str | None:
    if value is None:
        return None
    p = Path(value)
    if not p.is_file() or not os.access(p, os.X_OK):
        raise HarnessError(f"{flag} {value!r} is not an executable file; give the tool's entry point in its virtualenv, "
                           f"e.g. {flag} /tmp/venv-{flag.lstrip('-')}/bin/{flag.lstrip('-')}.")
    return str(p.resolve())


def validate(args: argparse.Namespace) -> tuple[list[str], Workload, Tools]:
    _positive("--rounds", args.rounds, integer=True)
    _positive("--requests", args.requests, integer=True)
    _positive("--input-tokens", args.input_tokens, integer=True)
    _positive("--output-tokens", args.output_tokens, integer=True)
    _positive("--concurrency", args.concurrency, integer=True)
    _positive("--sample-interval-s", args.sample_interval_s)
    if args.sample_interval_s > 5.0:
        raise HarnessError(f"--sample-interval-s must be at most 5 s (the load lasts a few seconds), got {args.sample_interval_s!r}; "
                           "give about 0.1.")
    _positive("--run-timeout-s", args.run_timeout_s)
    _positive("--max-loadavg", args.max_loadavg)
    _positive("--max-busy-pct", args.max_busy_pct)
    if args.max_busy_pct > 100:
        raise HarnessError(f"--max-busy-pct is a percentage of all CPUs, at most 100, got {args.max_busy_pct!r}; give e.g. 15.")
    if args.quiet_timeout_s < 0:
        raise HarnessError(f"--quiet-timeout-s must be >= 0, got {args.quiet_timeout_s!r}; give 0 to start at once.")
    tools = Tools(guidellm=_executable("--guidellm", args.guidellm), aiperf=_executable("--aiperf", args.aiperf))
    given = {"ours": True, "guidellm": tools.guidellm is not None, "aiperf": tools.aiperf is not None}
    if args.tools is None:
        chosen = [t for t in TOOLS if given[t]]
    else:
        chosen = [x.strip() for x in args.tools.split(",") if x.strip()]
        bad = [x for x in chosen if x not in TOOLS]
        if bad or not chosen:
            raise HarnessError(f"--tools takes a comma-separated subset of {','.join(TOOLS)}, got {args.tools!r}.")
        missing = [x for x in chosen if not given[x]]
        if missing:
            raise HarnessError(f"--tools names {','.join(missing)} but no executable was given; add "
                               + " ".join(f"--{m} PATH" for m in missing) + ".")
        chosen = [t for t in TOOLS if t in chosen]  # the round-robin order is fixed
    if any(t in chosen for t in ("guidellm", "aiperf")):
        if args.tokenizer is None:  # the word-level tokenizer of the target's own token count, built here
            args.tokenizer = str(write_word_tokenizer(Path(args.work_dir or tempfile.mkdtemp(prefix="tool-compare-")) / "tokenizer"))
        if not (Path(args.tokenizer) / "tokenizer.json").is_file():
            raise HarnessError(f"--tokenizer {args.tokenizer!r} has no tokenizer.json; give the directory that save_pretrained wrote.")
        tools.tokenizer = str(Path(args.tokenizer).resolve())
    if args.out is not None and not Path(args.out).resolve().parent.is_dir():
        raise HarnessError(f"--out {args.out!r}: its directory does not exist; create it or give another path.")
    if args.work_dir is not None and Path(args.work_dir).exists() and not Path(args.work_dir).is_dir():
        raise HarnessError(f"--work-dir {args.work_dir!r} exists and is not a directory; give a directory.")
    wl = Workload(int(args.requests), int(args.input_tokens), int(args.output_tokens), int(args.concurrency))
    return chosen, wl, tools


def write_word_tokenizer(out_dir: Path) -> Path:
    """A Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json) that counts one token per
    whitespace-separated word, as the fixed-timing target does, over the words of workloads.prompts; the
    tools need a tokenizer to build prompts and nothing may be downloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from workloads.prompts import WORDS

    vocab = {"[UNK]": 0, "tok": 1}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    out_dir.mkdir(parents=True, exist_ok=True)
    tk.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1_000_000}, indent=2))
    return out_dir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.bench.tool_compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--guidellm", help="path of the guidellm executable (e.g. /tmp/venv-guidellm/bin/guidellm); not given: skipped")
    p.add_argument("--aiperf", help="path of the aiperf executable (e.g. /tmp/venv-aiperf/bin/aiperf); not given: skipped")
    p.add_argument("--tokenizer", help="local directory with tokenizer.json for guidellm / AIPerf (nothing is downloaded); "
                                       "default: a word-level one written to the work directory")
    p.add_argument("--tools", default=None, help="comma-separated subset of ours,guidellm,aiperf (default: ours and every tool given)")
    p.add_argument("--rounds", type=int, default=1, help="rounds; each runs every tool once, in the order ours, guidellm, aiperf")
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=4096)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--sample-interval-s", type=float, default=0.1)
    p.add_argument("--run-timeout-s", type=float, default=600.0, help="a command running longer is stopped")
    p.add_argument("--max-loadavg", type=float, default=1.0, help="wait before each run until the 1-minute load average is below this")
    p.add_argument("--max-busy-pct", type=float, default=15.0, help="... and the CPUs were less busy than this over 3 s")
    p.add_argument("--quiet-timeout-s", type=float, default=120.0, help="wait at most this long for a quiet machine (recorded)")
    p.add_argument("--work-dir", default=None, help="where runs keep their logs and samples (default: a new /tmp directory)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if not r["problems"]]
    return {"load_window": ratios(ok, "tokens_per_cpu_s_load_window"),
            "whole_command": ratios(ok, "tokens_per_cpu_s_whole_command"),
            "runs_left_out": [f"round {r['round']} {r['tool']}: {r['problems']}" for r in runs if r["problems"]]}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        chosen, wl, tools = validate(args)
        work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="tool-compare-"))
        work_dir.mkdir(parents=True, exist_ok=True)
        res: dict[str, Any] = {
            "host": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                     "kernel": platform.release()},
            "workload": {**asdict(wl), "tokens": wl.tokens, "api": "/v1/completions", "streaming": True,
                         "target": "harness.target --profile fixed --ttft-s 0 --itl-s 0"},
            "tools": chosen, "work_dir": str(work_dir), "runs": []}
        for rnd in range(1, args.rounds + 1):
            for tool in chosen:
                res["runs"].append(one_run(tool, rnd, wl, tools, work_dir, args))
                res["summary"] = summarise(res["runs"])
                if args.out:  # after every run, so an interrupted series keeps what it measured
                    Path(args.out).write_text(json.dumps(res, indent=2))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(res["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
