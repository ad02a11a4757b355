"""Speed of the load generator against a fast local target that logs when it emits each token.

Three measurements (results recorded in docs/loadgen-speed.md):
  light   2 req/s, 100 ms TTFT, 20 ms ITL: client TTFT error vs the target's emit log (goal p99 < 1 ms)
  c64     64 concurrent streams at a 1 ms token cadence on one client process (goal p99 < 10 ms)
  tput    streams written whole by the target: output tokens per second per client CPU second, every chunk recorded

The target is harness.target in its fixed-timing profile (aiohttp, one process); the client is
workloads.loadrun with no workers (one process, one core). Error = client arrival − target emit
(perf_counter_ns on both sides, same host). Run: .venv/bin/python -m harness.bench.loadgen_speed [--quick]
[--only light,c64,tput] [--tput-api chat|completions]; each part records the load average it ran under.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np


def _errors(run) -> dict:
    df = run.table("requests")
    em = run.table("target_emits")
    ok = df[df["error_class"] == "ok"]
    first = em[em["token_index"] == 0].set_index("response_id")["emit_ns"]
    ttft_err = ((ok.set_index("response_id")["first_token_ns"] - first).dropna() / 1e6).to_numpy()
    # every token: k-th content event of a response vs the k-th emitted token (one token per event here)
    em_sorted = em.sort_values(["response_id", "token_index"])
    by_id = {rid: g["emit_ns"].to_numpy() for rid, g in em_sorted.groupby("response_id")}
    tok_err = []
    for rid, chunks in zip(ok["response_id"], ok["chunk_ns"]):
        e = by_id.get(rid)
        c = np.asarray(chunks, dtype=np.int64)
        if e is not None and len(e) == len(c):
            tok_err.append((c - e) / 1e6)
    tok = np.concatenate(tok_err) if tok_err else np.zeros(0)
    pct = lambda a, q: float(np.percentile(a, q)) if a.size else None  # noqa: E731
    return {"requests_ok": int(len(ok)), "requests": int(len(df)),
            "ttft_error_ms": {"p50": pct(ttft_err, 50), "p99": pct(ttft_err, 99), "max": float(ttft_err.max()) if ttft_err.size else None},
            "token_error_ms": {"p50": pct(tok, 50), "p99": pct(tok, 99), "max": float(tok.max()) if tok.size else None, "count": int(tok.size)}}


def _run(name: str, target_args: list[str], art, tmp: Path, *, concurrency: int = 256) -> tuple[dict, object]:
    from harness.store import Run
    from harness.target.process import start_target
    from workloads.artifact import save_artifact
    from workloads.config import LoadConfig
    from harness.bench.load import run_load

    with start_target(target_args, max_lifetime_s=600) as t:
        cfg = LoadConfig(target_url=t.url, artifact_path=str(save_artifact(art, tmp)), run_id=f"speed-{name}-{tmp.name}",
                         results_dir=str(tmp / "results"), fetch_emit_log=True, max_concurrency=concurrency, progress=False,
                         request_timeout_s=120.0, drain_timeout_s=120.0)
        run = Run(run_load(cfg, tmp, progress=None, timeout_s=600))
    return run.json("summary.json"), run


def main(argv: list[str] | None = None) -> int:
    from workloads.mixes import single_turn
    from workloads.schedule import burst, constant

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="shorter runs")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--only", default="light,c64,tput", help="comma-separated subset of light,c64,tput (default: all three)")
    p.add_argument("--light-s", type=float, default=None,
                   help="length of the light run in seconds (default 150: 300 requests, enough for a stable p99; 10 with --quick)")
    p.add_argument("--tput-api", choices=["chat", "completions"], default="chat", help="API of the throughput streams (default chat)")
    args = p.parse_args(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if not only or only - {"light", "c64", "tput"}:
        p.error(f"--only takes a comma-separated subset of light,c64,tput, got {args.only!r}")
    if args.light_s is not None and not (1.0 <= args.light_s <= 3600.0):
        p.error(f"--light-s is the light run's length in seconds, from 1 to 3600; got {args.light_s!r}")
    q = args.quick
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-speed-"))
    res: dict = {"host": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                          "cores": os.cpu_count()}}

    # the load average is recorded with each part: on a shared machine it explains most of the timing error
    def load() -> list[float]:
        return [round(x, 2) for x in os.getloadavg()]

    if "light" in only:  # 2 req/s, 100 ms TTFT, 20 ms ITL
        la = load()
        art = single_turn("light", constant(2.0, args.light_s or (10.0 if q else 150.0)), input_tokens=64, output_tokens=50)
        s, run = _run("light", ["--profile", "fixed", "--ttft-s", "0.1", "--itl-s", "0.02"], art, tmp / "light")
        res["light"] = {**_errors(run), "rate_per_s": 2.0, "ttft_s": 0.1, "itl_s": 0.02, "client": s["client_process"],
                        "loadavg_before": la, "loadavg_after": load()}

    if "c64" in only:  # 64 concurrent streams at a 1 ms token cadence
        la = load()
        art = single_turn("c64", burst(64, 1e-9, 1.0), input_tokens=16, output_tokens=1000 if q else 3000)
        s, run = _run("c64", ["--profile", "fixed", "--ttft-s", "0.05", "--itl-s", "0.001"], art, tmp / "c64")
        res["c64"] = {**_errors(run), "streams": 64, "itl_s": 0.001, "client": s["client_process"],
                      "target_tokens_per_s": 64 * 1000.0, "loadavg_before": la, "loadavg_after": load()}

    if "tput" in only:  # 32 streams in flight, each written whole, every chunk recorded
        la = load()
        n_req, n_out = (64, 4096) if q else (256, 4096)
        art = single_turn("tput", burst(n_req, 1e-9, 1.0), input_tokens=16, output_tokens=n_out, api=args.tput_api)
        s, run = _run("tput", ["--profile", "fixed", "--ttft-s", "0.0", "--itl-s", "0.0"], art, tmp / "tput", concurrency=32)
        df = run.table("requests")
        tokens = int(df["output_tokens_chunks"].sum())
        cpu = s["client_process"]["cpu_s"]
        res["tput"] = {"requests": n_req, "output_tokens_per_request": n_out, "api": args.tput_api, "chunks_recorded": tokens,
                       "client_cpu_s": cpu, "wall_s": s["client_process"]["wall_s"],
                       "tokens_per_s_per_client_core": tokens / cpu if cpu else None,
                       "tokens_per_s_wall": tokens / s["client_process"]["wall_s"],
                       "loadavg_before": la, "loadavg_after": load()}
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
