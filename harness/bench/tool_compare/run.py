"""One run of one tool: wait for a quiet machine, start a fresh fixed-timing target, run the tool's command
sampled, check the target's and the tool's counts, find the load window, and return the run's record."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.bench.token_server import start_token_server
from harness.bench.tool_compare.adapters import Tools, Workload, adapter, tool_report
from harness.bench.tool_compare.light import client_minus_server, server_ttft_ms
from harness.bench.tool_compare.sampling import TargetPoller, find_load_window, run_sampled
from harness.target.process import start_target
from harness.telemetry.proc import wait_quiet


LIGHT_MIN_SHARE = 0.95  # --mode light: a tool's output must hold a TTFT for at least this share of the requests
LIGHT_TTFT_S = 0.1  # --mode light: the token server's fixed TTFT (its ITL is --server-itl-s, 0.02 in that mode)


def _emit_log(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/harness/emit_log", timeout=60) as r:
        return json.loads(r.read())


def _server(args: argparse.Namespace) -> Any:
    """A fresh server for one run: the embedded target writing each stream whole, or the one-token-per-write server."""
    if getattr(args, "server", "target") == "token":
        light = getattr(args, "mode", "throughput") == "light"
        return start_token_server(ttft_s=LIGHT_TTFT_S if light else 0.0, itl_s=args.server_itl_s, cpu=args.server_cpu,
                                  emit_log=light, max_lifetime_s=args.run_timeout_s + 120)

    return start_target(["--profile", "fixed", "--ttft-s", "0", "--itl-s", "0"], max_lifetime_s=args.run_timeout_s + 120)


def one_run(tool: str, rnd: int, wl: Workload, tools: Tools, work_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    ad = adapter(tool)
    run_dir = work_dir / f"r{rnd}-{tool}"
    run_dir.mkdir(parents=True, exist_ok=True)
    quiet = wait_quiet(args.max_loadavg, args.max_busy_pct, args.quiet_timeout_s)
    rec: dict[str, Any] = {"tool": tool, "round": rnd, "start_conditions": quiet, "run_dir": str(run_dir),
                           "server": getattr(args, "server", "target")}
    print(f"[tool_compare] round {rnd} {tool}: load {quiet['loadavg_1m']} busy {quiet['busy_pct_3s']} % "
          f"(waited {quiet['waited_s']} s{'' if quiet['quiet'] else ', never quiet'})", file=sys.stderr, flush=True)
    with _server(args) as t:
        cmd, cwd = ad.command(t.url, wl, tools, run_dir)
        rec["command"] = cmd
        env = ad.environment({**os.environ, **tools.extra_env})
        rec["env_offline"] = {k: env.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        poller = TargetPoller(t.url)
        try:
            res = run_sampled(cmd, cwd=cwd, env=env, log_dir=run_dir, poller=poller,
                              n_requests=wl.requests, interval_s=args.sample_interval_s, timeout_s=args.run_timeout_s)
            target_final = poller.counters()
            emits = _emit_log(t.url) if getattr(args, "mode", "throughput") == "light" else None
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
    rec.update(ad.extra(rec, wl))
    if emits is not None:
        try:
            rec["light"] = client_minus_server(ad.ttfts_ms(run_dir, stdout), server_ttft_ms(emits))
        except (OSError, ValueError, KeyError, IndexError) as exc:
            problems.append(f"the tool's per-request TTFTs could not be read: {type(exc).__name__}: {exc}")
        else:
            n = rec["light"]["client_ttft_ms"]["n"]
            if n < LIGHT_MIN_SHARE * wl.requests:
                problems.append(f"{n} TTFTs in the tool's output, expected {wl.requests}")
            elif n != wl.requests:  # guidellm 0.8.1 reported 299 of 300 (the target served all 300)
                rec["light"]["note"] = f"{n} of {wl.requests} requests in the tool's per-request output"
    rec["problems"] = problems
    lw = rec["load_window"] or {}
    if rec.get("light"):
        m = rec["light"].get("matched_ms") or rec["light"].get("by_quantile_ms") or {}
        print(f"[tool_compare] round {rnd} {tool}: client - server TTFT p50 {m.get('p50', float('nan')):.3f} ms, "
              f"p99 {m.get('p99', float('nan')):.3f} ms", file=sys.stderr, flush=True)
    print(f"[tool_compare] round {rnd} {tool}: window {lw.get('cpu_s', float('nan')):.2f} CPU s / {lw.get('wall_s', float('nan')):.2f} s "
          f"-> {(lw.get('tokens_per_cpu_s') or 0) / 1e3:.1f} k tok/CPU s; whole {res['rusage_cpu_s']:.2f} CPU s"
          + (f"; PROBLEMS: {problems}" if problems else ""), file=sys.stderr, flush=True)
    return rec
