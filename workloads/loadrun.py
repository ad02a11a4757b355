"""The load process: Locust (local, or a master with workers on this host and others) driving one run into results/.

`python -m workloads.loadrun CONFIG.json` runs the local or master side and owns the run directory
(workloads.coordinator). Local workers are plain Locust workers started here
(`locust -f workloads/locustfile.py --worker`); remote ones are the same command run on other hosts
against this master's bind address (workloads.distributed). Progress is one JSON line a second.
SIGINT/SIGTERM end the run early: requests in flight are recorded as `cancelled`, the summary is
written, the manifest says failed (interrupted) and the exit status is 130.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from time import perf_counter_ns  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import locust  # noqa: E402,F401 - imported for its gevent setup before anything else touches sockets
from locust.env import Environment  # noqa: E402
from locust.log import setup_logging  # noqa: E402

from harness.errors import HarnessError  # noqa: E402
from workloads.config import LoadConfig  # noqa: E402
from workloads.coordinator import Coordinator, configure_user  # noqa: E402
from workloads.loadstate import LoadState, set_state  # noqa: E402
from workloads.locustfile import OpenAIStreamUser  # noqa: E402

WORKER_READY_TIMEOUT_S = 60.0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _local_worker_cmd(host: str, port: int) -> list[str]:
    """A plain Locust worker, exactly what a user starts on another host (docs/loadgen.md)."""
    locustfile = str(Path(__file__).resolve().parent / "locustfile.py")
    return [sys.executable, "-m", "locust", "-f", locustfile, "--worker", "--master-host", host, "--master-port", str(port),
            "--loglevel", "WARNING"]


def run(cfg: LoadConfig) -> int:
    """Drive one run on this process's own Locust environment (local, or a master with local and/or remote workers)."""
    coord = Coordinator(cfg)

    def _stop(signum: int, _frame: Any) -> None:
        coord.stop_requested = coord.stop_requested or signal.Signals(signum).name

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    procs: list[subprocess.Popen] = []
    exc_out: BaseException | None = None
    try:
        coord.open()
        configure_user(cfg)
        env = Environment(user_classes=[OpenAIStreamUser], host=cfg.target_url)
        n_workers = cfg.workers + cfg.remote_workers
        if n_workers == 0:
            runner = env.create_local_runner()
            coord.attach(runner, set_state(LoadState(cfg, 0, 1)))
        else:
            port = cfg.master_port or _free_port(cfg.master_bind_host)
            runner = env.create_master_runner(master_bind_host=cfg.master_bind_host, master_bind_port=port)
            coord.attach(runner)
            connect_host = "127.0.0.1" if cfg.master_bind_host in ("0.0.0.0", "*", "") else cfg.master_bind_host
            for _ in range(cfg.workers):
                procs.append(subprocess.Popen(_local_worker_cmd(connect_host, port)))
            if cfg.remote_workers:
                print(json.dumps({"waiting_for_workers": {"expected": n_workers, "master": f"{cfg.master_bind_host}:{port}",
                                                          "command": f"locust -f workloads/locustfile.py --worker "
                                                                     f"--master-host {connect_host} --master-port {port}"}}),
                      flush=True)
            deadline = time.monotonic() + (cfg.worker_wait_s if cfg.remote_workers else WORKER_READY_TIMEOUT_S)
            while len(runner.clients.ready) < n_workers:
                if coord.stop_requested:
                    raise KeyboardInterrupt(f"interrupted ({coord.stop_requested}) while waiting for workers")
                if time.monotonic() > deadline:
                    raise HarnessError(f"only {len(runner.clients.ready)} of {n_workers} Locust workers connected to "
                                       f"{cfg.master_bind_host}:{port} in time; start the missing ones with "
                                       f"`locust -f workloads/locustfile.py --worker --master-host {connect_host} --master-port {port}`.")
                gevent.sleep(0.1)
        coord.begin()
        users = max(1, min(cfg.max_concurrency, len(coord.artifact.sessions())))
        runner.start(users, spawn_rate=max(users, 1000))
        coord.wait()
        coord.finish()
        runner.quit()
    except BaseException as exc:  # noqa: BLE001 - keep what was measured, then report the error that ended the run
        exc_out = exc
        try:
            if not coord.finished and coord.t0_ns:
                coord.finish()
        except Exception:  # noqa: BLE001
            pass
    finally:
        coord.close(exc_out)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if exc_out is not None:
        raise exc_out
    if coord.stop_requested:
        print(coord.kept_message(), file=sys.stderr, flush=True)
        print(json.dumps({"run_dir": str(coord.writer.path), "valid": False, "interrupted": coord.stop_requested}), flush=True)
        return 130
    print(json.dumps({"run_dir": str(coord.writer.path), "valid": coord.summary.valid}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.loadrun", description=__doc__)
    p.add_argument("config")
    args = p.parse_args(argv)
    setup_logging("WARNING")
    try:
        return run(LoadConfig.load(args.config))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
