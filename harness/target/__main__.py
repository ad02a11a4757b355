"""`python -m harness.target`: serve the simulated deployment of a scenario (or the fixed-timing profile) on 127.0.0.1."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

from harness.errors import HarnessError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.target", description=__doc__)
    p.add_argument("--scenario", help="scenario TOML whose deployment to emulate (profile 'scenario')")
    p.add_argument("--profile", choices=["scenario", "fixed", "twin"], default="scenario",
                   help="'scenario': the emulated deployment; 'fixed': fixed TTFT/ITL per request, no queues (client benchmarks); "
                        "'twin': the digital twin of a real engine given by --twin")
    p.add_argument("--twin", default=None, help="twin spec JSON (written by `harness loop cpu`): serve that engine's twin")
    p.add_argument("--mode", choices=["pd", "colocated"], default=None, help="PD or colocated (default: PD when the scenario has a link)")
    p.add_argument("--allocation", default="best", help="'best' (the model's optimum) or a reference allocation of the scenario")
    p.add_argument("--startup-s", type=float, default=None, help="simulated seconds before anything is served (default: scenario startup.startup_s)")
    p.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per simulated second (0.1 = ten times faster)")
    p.add_argument("--ttft-s", type=float, default=0.1, help="fixed profile: time to first token")
    p.add_argument("--itl-s", type=float, default=0.02, help="fixed profile: inter-token latency (0: whole stream in one write)")
    p.add_argument("--model-name", default=None, help="model name reported by the server (default: the scenario's model)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    p.add_argument("--profile-dir", default=None, help="where /stop_profile writes its trace when the call names no output_dir "
                                                       "(default: TMPDIR/harness-target-profile)")
    p.add_argument("--ready-file", default=None, help="write {url, pid} as JSON here once listening")
    p.add_argument("--max-lifetime-s", type=float, default=3600.0, help="exit after this many wall seconds regardless (a safety bound)")
    return p


def _build(args: argparse.Namespace):
    from harness.target.clock import SimClock
    from harness.target.engine import Engine, FixedTimingEngine
    from harness.target.server import TargetServer

    clock = SimClock(args.time_scale)
    if args.profile == "fixed":
        for name in ("ttft_s", "itl_s"):
            v = getattr(args, name)
            if not v >= 0:
                raise HarnessError(f"--{name.replace('_', '-')} must be >= 0, got {v!r}.")
        engine = FixedTimingEngine(clock, None, args.ttft_s, args.itl_s)  # type: ignore[arg-type]
        info = {"simulated": True, "profile": "fixed", "ttft_s": args.ttft_s, "itl_s": args.itl_s, "time_scale": args.time_scale}
        return TargetServer(engine, info, args.model_name or "harness-fixed", args.profile_dir)
    if args.twin or args.profile == "twin":
        if not args.twin:
            raise HarnessError("--profile twin needs --twin FILE (the twin.json a `harness loop cpu` run stores).")
        from harness.target.twin import load_twin

        spec = load_twin(args.twin)
        sched = spec.make_scheduler()
        engine = Engine(sched, clock, None)  # type: ignore[arg-type]
        info = {**sched.info(), "profile": "twin", "model": spec.model, "source": spec.source, "time_scale": args.time_scale}
        return TargetServer(engine, info, args.model_name or "harness-twin", args.profile_dir)
    if not args.scenario:
        raise HarnessError("give --scenario PATH (e.g. workloads/scenarios/ch9-hetero-pd.toml) or --profile fixed.")
    from harness.specs.scenario import load_scenario
    from harness.target.deployment import deployment_from_scenario

    s = load_scenario(args.scenario)
    dep = deployment_from_scenario(s, allocation=args.allocation, mode=args.mode, startup_s=args.startup_s)
    engine = Engine(dep, clock, None)  # type: ignore[arg-type]
    info = {**dep.to_dict(), "profile": "scenario", "time_scale": args.time_scale, "scenario_path": str(args.scenario)}
    return TargetServer(engine, info, args.model_name or dep.model, args.profile_dir)


async def _serve(args: argparse.Namespace) -> None:
    from aiohttp import web

    server = _build(args)
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    site = web.SockSite(runner, sock)
    await site.start()
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    print(f"simulated target listening on {url} ({server.info.get('profile')})", flush=True)
    if args.ready_file:
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "info": server.info}))
        os.replace(tmp, args.ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), timeout=args.max_lifetime_s)
    except asyncio.TimeoutError:
        print("simulated target: max lifetime reached, exiting", file=sys.stderr)
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(_serve(args))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
