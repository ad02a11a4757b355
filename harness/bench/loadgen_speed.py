"""Speed of the load generator, measured the way real servers write: one SSE event per socket write.

Headline parts, against the independent one-token-per-write server (harness.bench.token_server: stdlib selectors,
one `send` per token at a fixed cadence, emit stamp taken immediately before each send), the server pinned to
one core and the client to the others (`--server-cpu`, `--client-cpus`; recorded in the output):
  light    2 req/s, TTFT 100 ms, ITL 20 ms, >= 300 requests x 50 tokens: client TTFT error against the server's
           emit log (arrival − emit), every token's error, and client-minus-server TTFT (client TTFT − server TTFT,
           the server's TTFT being first emit − its reading of the request) from `sent` and from `written`
  c64      64 concurrent streams at a 1 ms cadence, 3000 tokens each: the same errors under load
  tput     256 concurrent streams at a 1 ms cadence, 4096 tokens each (the issue's setup): output tokens per client
           CPU second, every chunk recorded; events per read; the server's send counters
  bare     the tput workload through a bare Locust-style loop that keeps first and last times only
           (harness.bench.bare_locust), so "ours / bare" is measured, not assumed
  workers  the tput workload with `--workers N` for each N of `--workers-list` (default 1,2): tokens per client CPU
           second per worker and wall throughput (a 2-core machine cannot show wall scaling; docs/loadgen-speed.md)
Secondary parts, against the embedded target (harness.target --profile fixed, aiohttp), as measured before:
  target-light, target-c64   as light and c64;   target-tput   32 streams in flight, each stream written whole
Default: light,c64,tput,bare,workers,target-tput. Error = client stamp − server stamp, perf_counter_ns on both
sides (CLOCK_MONOTONIC, same host). Each part records the load average it started and ended under.

Run: .venv/bin/python -m harness.bench.loadgen_speed --out speed.json [--quick] [--only PARTS] [--light-s 150]
     [--tput-api chat|completions] [--workers-list 1,2] [--server-cpu 1 --client-cpus 0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from harness.bench.load import run_load
from harness.bench.token_server import start_token_server
from harness.records import cpu_model
from harness.store import Run
from harness.target.process import start_target
from workloads.artifact import save_artifact
from workloads.config import LoadConfig
from workloads.mixes import single_turn
from workloads.schedule import burst, constant

TOKEN_PARTS = ("light", "c64", "tput", "bare", "workers")
TARGET_PARTS = ("target-light", "target-c64", "target-tput")
PARTS = TOKEN_PARTS + TARGET_PARTS
DEFAULT_PARTS = ("light", "c64", "tput", "bare", "workers", "target-tput")


def _pct(a: np.ndarray) -> dict[str, float | None]:
    f = (lambda q: float(np.percentile(a, q))) if a.size else (lambda q: None)  # noqa: E731
    return {"p50": f(50), "p90": f(90), "p99": f(99), "max": float(a.max()) if a.size else None, "count": int(a.size)}


def timing_errors(run: Any, ttft_s: float | None = None) -> dict[str, Any]:
    """Client stamps against the server's emit log (table target_emits), in ms.

    ttft_error_ms: first content event − emit of token 0 (arrival error of the first token);
    token_error_ms: every content event − the emit of the same token (one token per event here);
    client_minus_server_ttft_ms (when the server's TTFT reference is known, `ttft_s` = its fixed TTFT, so its request
    read = scheduled(token 0) − ttft_s): client TTFT − server TTFT, from `sent` (ttft_s) and from `written`
    (ttft_from_written_s); server TTFT = emit of token 0 − the server's reading of the request."""
    df = run.table("requests")
    em = run.table("target_emits")
    ok = df[df["error_class"] == "ok"].set_index("response_id")
    e0 = em[em["token_index"] == 0].set_index("response_id")
    ttft_err = ((ok["first_token_ns"] - e0["emit_ns"]).dropna() / 1e6).to_numpy()
    by_id = {rid: g["emit_ns"].to_numpy() for rid, g in em.sort_values(["response_id", "token_index"]).groupby("response_id")}
    tok = []
    for rid, chunks in zip(ok.index, ok["chunk_ns"]):
        e = by_id.get(rid)
        c = np.asarray(chunks, dtype=np.int64)
        if e is not None and len(e) == len(c):
            tok.append((c - e) / 1e6)
    out: dict[str, Any] = {"requests_ok": int(len(ok)), "requests": int(len(df)), "ttft_error_ms": _pct(ttft_err),
                           "token_error_ms": _pct(np.concatenate(tok) if tok else np.zeros(0))}
    if "body_reads" in ok and ok["body_reads"].notna().all() and ok["body_reads"].sum() > 0:
        out["events_per_read"] = float(ok["output_tokens_chunks"].sum() / ok["body_reads"].sum())
    if ttft_s is not None:
        server_ttft_ns = e0["emit_ns"] - (e0["scheduled_ns"] - int(round(ttft_s * 1e9)))
        sent = ((ok["ttft_s"] * 1e9 - server_ttft_ns).dropna() / 1e6).to_numpy()
        out["client_minus_server_ttft_ms"] = {"from_sent": _pct(sent)}
        if "ttft_from_written_s" in ok and ok["ttft_from_written_s"].notna().any():
            wr = ((ok["ttft_from_written_s"] * 1e9 - server_ttft_ns).dropna() / 1e6).to_numpy()
            out["client_minus_server_ttft_ms"]["from_written"] = _pct(wr)
            out["request_write_ms"] = _pct(((ok["written_ns"] - ok["sent_ns"]).dropna() / 1e6).to_numpy())
    return out


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Affinity:
    """The cores of the server and of the client (this process and every load process it starts)."""

    def __init__(self, server_cpu: int | None, client_cpus: list[int] | None):
        self.server_cpu = server_cpu
        self.client_cpus = client_cpus
        self.original = sorted(os.sched_getaffinity(0))

    def pin_client(self) -> None:
        if self.client_cpus:
            os.sched_setaffinity(0, set(self.client_cpus))

    def restore(self) -> None:
        os.sched_setaffinity(0, set(self.original))

    def to_dict(self) -> dict[str, Any]:
        return {"server_cpu": self.server_cpu, "client_cpus": self.client_cpus, "machine_cpus": self.original,
                "separate_cores": self.server_cpu is not None and bool(self.client_cpus) and self.server_cpu not in self.client_cpus}


def _token_server(aff: Affinity, ttft_s: float, itl_s: float, emit_log: bool) -> Any:
    return start_token_server(ttft_s=ttft_s, itl_s=itl_s, cpu=aff.server_cpu, emit_log=emit_log, max_lifetime_s=1800)


def _server_info(url: str) -> dict[str, Any]:
    return json.loads(urllib.request.urlopen(url + "/harness/info", timeout=30).read())


def _load(name: str, url: str, art: Any, tmp: Path, aff: Affinity, *, concurrency: int, emit_log: bool, workers: int = 0) -> Any:
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    cfg = LoadConfig(target_url=url, artifact_path=str(save_artifact(art, d)), run_id=f"speed-{name}-{tmp.name}",
                     results_dir=str(d / "results"), fetch_emit_log=emit_log, max_concurrency=concurrency, progress=False,
                     request_timeout_s=300.0, drain_timeout_s=300.0, workers=workers)
    aff.pin_client()
    try:
        return Run(run_load(cfg, d, progress=None, timeout_s=1200))
    finally:
        aff.restore()


def _tput_record(run: Any, n_req: int, n_out: int, api: str) -> dict[str, Any]:
    df = run.table("requests")
    ok = df[df["error_class"] == "ok"]
    cp = run.json("summary.json")["client_process"]
    tokens = int(ok["output_tokens_chunks"].sum())
    # without workers the load process runs every user; with workers they do, so their CPU counts too
    basis = "all_processes_cpu_s" if cp.get("workers") else "cpu_s"
    cpu = cp.get(basis, cp["cpu_s"])
    reads = ok["body_reads"].sum() if "body_reads" in ok else 0
    return {"requests": n_req, "requests_ok": int(len(ok)), "output_tokens_per_request": n_out, "api": api,
            "chunks_recorded": tokens, "every_chunk_recorded": tokens == n_req * n_out, "client": cp, "client_cpu_s": cpu,
            "client_cpu_basis": f"summary.json client_process.{basis}",
            "wall_s": cp["wall_s"], "tokens_per_client_cpu_s": tokens / cpu if cpu else None,
            "tokens_per_s_wall": tokens / cp["wall_s"] if cp["wall_s"] else None,
            "events_per_read": float(tokens / reads) if reads else None}


def part_light(a: argparse.Namespace, tmp: Path, aff: Affinity, *, target: bool) -> dict[str, Any]:
    art = single_turn("light", constant(2.0, a.light_s or (10.0 if a.quick else 150.0)), input_tokens=64, output_tokens=50)
    rec: dict[str, Any] = {"rate_per_s": 2.0, "ttft_s": 0.1, "itl_s": 0.02, "tokens_per_request": 50}
    if target:
        run = _target_load("target-light", ["--ttft-s", "0.1", "--itl-s", "0.02"], art, tmp, aff, concurrency=256)
    else:
        with _token_server(aff, 0.1, 0.02, True) as s:
            run = _load("light", s.url, art, tmp, aff, concurrency=256, emit_log=True)
            rec["server"] = _server_info(s.url)
    return {**timing_errors(run, 0.1), **rec, "client": run.json("summary.json")["client_process"]}


def part_c64(a: argparse.Namespace, tmp: Path, aff: Affinity, *, target: bool) -> dict[str, Any]:
    n_out = 1000 if a.quick else 3000
    art = single_turn("c64", burst(64, 1e-9, 1.0), input_tokens=16, output_tokens=n_out)
    rec: dict[str, Any] = {"streams": 64, "ttft_s": 0.05, "itl_s": 0.001, "tokens_per_request": n_out,
                           "server_tokens_per_s_intended": 64 * 1000.0}
    if target:
        run = _target_load("target-c64", ["--ttft-s", "0.05", "--itl-s", "0.001"], art, tmp, aff, concurrency=64)
    else:
        with _token_server(aff, 0.05, 0.001, True) as s:
            run = _load("c64", s.url, art, tmp, aff, concurrency=64, emit_log=True)
            rec["server"] = _server_info(s.url)
    return {**timing_errors(run, 0.05), **rec, "client": run.json("summary.json")["client_process"]}


def _tput_workload(a: argparse.Namespace) -> tuple[int, int, Any]:
    n_req, n_out = (64, 2048) if a.quick else (256, 4096)
    return n_req, n_out, single_turn("tput", burst(n_req, 1e-9, 1.0), input_tokens=16, output_tokens=n_out, api=a.tput_api)


def part_tput(a: argparse.Namespace, tmp: Path, aff: Affinity) -> dict[str, Any]:
    n_req, n_out, art = _tput_workload(a)
    with _token_server(aff, 0.01, 0.001, False) as s:
        run = _load("tput", s.url, art, tmp, aff, concurrency=n_req, emit_log=False)
        info = _server_info(s.url)
    rec = _tput_record(run, n_req, n_out, a.tput_api)
    rec.update({"streams_concurrent": n_req, "itl_s": 0.001, "server": info,
                "server_one_write_per_token": info["token_send_calls"] == info["tokens_total"] and not info["partial_token_writes"]})
    return rec


def part_bare(a: argparse.Namespace, tmp: Path, aff: Affinity) -> dict[str, Any]:
    n_req, n_out, _ = _tput_workload(a)
    out = tmp / "bare.json"
    with _token_server(aff, 0.01, 0.001, False) as s:
        aff.pin_client()
        try:
            subprocess.run([sys.executable, "-m", "harness.bench.bare_locust", "--url", s.url, "--streams", str(n_req),
                            "--tokens", str(n_out), "--api", a.tput_api, "--out", str(out)], check=True, timeout=1200,
                           stdout=subprocess.DEVNULL)
        finally:
            aff.restore()
        info = _server_info(s.url)
    return {**json.loads(out.read_text()), "server": info}


def part_workers(a: argparse.Namespace, tmp: Path, aff: Affinity) -> dict[str, Any]:
    n_req, n_out, art = _tput_workload(a)
    res: dict[str, Any] = {"note": "per worker: its tokens / its CPU seconds from t0; wall: all tokens / the load's wall time. "
                                   f"Client cores {aff.client_cpus or aff.original}: N workers on fewer than N cores cannot "
                                   "scale the wall figure."}
    for n in a.workers_list:
        with _token_server(aff, 0.01, 0.001, False) as s:
            run = _load(f"workers{n}", s.url, art, tmp, aff, concurrency=n_req, emit_log=False, workers=n)
        rec = _tput_record(run, n_req, n_out, a.tput_api)
        df = run.table("requests")
        per = {}
        for w, cpu in rec["client"].get("worker_cpu_s", {}).items():
            toks = int(df.loc[(df["worker_index"] == int(w)) & (df["error_class"] == "ok"), "output_tokens_chunks"].sum())
            per[w] = {"tokens": toks, "cpu_s": cpu, "tokens_per_cpu_s": toks / cpu if cpu else None}
        rec["per_worker"] = per
        rec["tokens_per_cpu_s_all_processes"] = (rec["chunks_recorded"] / rec["client"]["all_processes_cpu_s"]
                                                 if rec["client"].get("all_processes_cpu_s") else None)
        res[str(n)] = rec
    base = res.get("1", {}).get("tokens_per_s_wall")
    for n in a.workers_list:
        if base and res[str(n)].get("tokens_per_s_wall"):
            res[str(n)]["wall_speedup_vs_1"] = res[str(n)]["tokens_per_s_wall"] / base
    return res


def _target_load(name: str, timing: list[str], art: Any, tmp: Path, aff: Affinity, *, concurrency: int, emit_log: bool = True) -> Any:
    with start_target(["--profile", "fixed", *timing], max_lifetime_s=1800) as t:
        if aff.server_cpu is not None:
            os.sched_setaffinity(t.proc.pid, {aff.server_cpu})
        return _load(name, t.url, art, tmp, aff, concurrency=concurrency, emit_log=emit_log)


def part_target_tput(a: argparse.Namespace, tmp: Path, aff: Affinity) -> dict[str, Any]:
    n_req, n_out = (64, 4096) if a.quick else (256, 4096)
    art = single_turn("tput", burst(n_req, 1e-9, 1.0), input_tokens=16, output_tokens=n_out, api=a.tput_api)
    run = _target_load("target-tput", ["--ttft-s", "0.0", "--itl-s", "0.0"], art, tmp, aff, concurrency=32, emit_log=False)
    return {**_tput_record(run, n_req, n_out, a.tput_api), "streams_concurrent": 32, "server": "harness.target --profile fixed "
            "--ttft-s 0 --itl-s 0 (each stream written whole)"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.bench.loadgen_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shorter runs (a smoke test, not a measurement)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--only", default=",".join(DEFAULT_PARTS), help=f"comma-separated parts of {','.join(PARTS)}")
    p.add_argument("--light-s", type=float, default=None,
                   help="length of the light runs in seconds (default 150: 300 requests; 10 with --quick)")
    p.add_argument("--tput-api", choices=["chat", "completions"], default="chat", help="API of the throughput streams")
    p.add_argument("--workers-list", default="1,2", help="the worker counts of the workers part (default 1,2)")
    p.add_argument("--server-cpu", type=int, default=None, help="core of the server (default: the last core, with >= 2 cores)")
    p.add_argument("--client-cpus", default=None, help="comma-separated cores of the client (default: every other core)")
    return p


def validate(a: argparse.Namespace) -> tuple[list[str], Affinity]:
    """Checked flags (a bad one raises ValueError naming it and the fix); the parts to run and the affinity."""
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    if not only or set(only) - set(PARTS):
        raise ValueError(f"--only takes a comma-separated subset of {','.join(PARTS)}, got {a.only!r}")
    if a.light_s is not None and not (1.0 <= a.light_s <= 3600.0):
        raise ValueError(f"--light-s is the light run's length in seconds, from 1 to 3600; got {a.light_s!r}")
    try:
        a.workers_list = [int(x) for x in str(a.workers_list).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--workers-list takes comma-separated worker counts such as 1,2; got {a.workers_list!r}") from None
    if not a.workers_list or any(n < 1 or n > 64 for n in a.workers_list):
        raise ValueError(f"--workers-list counts must be from 1 to 64; got {a.workers_list!r}")
    machine = sorted(os.sched_getaffinity(0))
    server = a.server_cpu if a.server_cpu is not None else (machine[-1] if len(machine) >= 2 else None)
    if server is not None and server not in machine:
        raise ValueError(f"--server-cpu {server} is not one of this process's cores {machine}")
    if a.client_cpus is not None:
        try:
            client = sorted({int(x) for x in a.client_cpus.split(",") if x.strip()})
        except ValueError:
            raise ValueError(f"--client-cpus takes comma-separated core numbers such as 0; got {a.client_cpus!r}") from None
        if not client or set(client) - set(machine):
            raise ValueError(f"--client-cpus must name cores of {machine}; got {a.client_cpus!r}")
    else:
        client = [c for c in machine if c != server] or None
    return [p for p in PARTS if p in only], Affinity(server, client)


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        parts, aff = validate(a)
    except ValueError as exc:
        print(f"error: {exc}.", file=sys.stderr)
        return 1

    tmp = Path(tempfile.mkdtemp(prefix="loadgen-speed-"))
    res: dict[str, Any] = {"host": {"cpu": cpu_model(), "python": platform.python_version(), "cores": os.cpu_count(),
                                    "kernel": platform.release()},
                           "affinity": aff.to_dict(), "command_line": [sys.executable, "-m", "harness.bench.loadgen_speed",
                                                                       *(argv if argv is not None else sys.argv[1:])],
                           "quick": a.quick, "parts": {}}
    runners = {"light": lambda: part_light(a, tmp, aff, target=False), "c64": lambda: part_c64(a, tmp, aff, target=False),
               "tput": lambda: part_tput(a, tmp, aff), "bare": lambda: part_bare(a, tmp, aff),
               "workers": lambda: part_workers(a, tmp, aff), "target-light": lambda: part_light(a, tmp, aff, target=True),
               "target-c64": lambda: part_c64(a, tmp, aff, target=True), "target-tput": lambda: part_target_tput(a, tmp, aff)}
    for name in parts:
        la, t0 = _loadavg(), time.monotonic()
        print(f"[loadgen_speed] {name} (load {la[0]})", file=sys.stderr, flush=True)
        res["parts"][name] = {**runners[name](), "loadavg_before": la, "loadavg_after": _loadavg(),
                              "part_wall_s": round(time.monotonic() - t0, 1)}
        if a.out:  # after every part, so an interrupted series keeps what it measured
            Path(a.out).write_text(json.dumps(res, indent=2))
    p = res["parts"]
    if "tput" in p and "bare" in p and p["bare"].get("tokens_per_cpu_s"):
        res["ours_over_bare"] = p["tput"]["tokens_per_client_cpu_s"] / p["bare"]["tokens_per_cpu_s"]
    text = json.dumps(res, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
