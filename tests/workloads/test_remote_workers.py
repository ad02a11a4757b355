"""The harness's own master (what `harness bench-pd --remote-workers 2` runs) with two plain Locust workers started
separately, as on other hosts, each connecting from its own loopback address (127.0.0.2, 127.0.0.3)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.load import run_load
from harness.store import Run
from harness.target.process import start_target
from workloads.artifact import save_artifact
from workloads.config import LoadConfig
from workloads.mixes import single_turn
from workloads.schedule import constant

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_remote_workers_join_the_harness_master(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_LOCUST_HEARTBEAT_LIVENESS", "30")  # the master's: a busy 2-core machine starves workers
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [subprocess.Popen([sys.executable, "-m", "locust", "-f", str(ROOT / "workloads/locustfile.py"), "--worker",
                                 "--master-host", f"{addr}:0;127.0.0.1", "--master-port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for addr in ("127.0.0.2", "127.0.0.3")]
    try:
        with start_target(["--profile", "fixed", "--ttft-s", "0.02", "--itl-s", "0.005"], max_lifetime_s=300) as t:
            art = single_turn("remote", constant(8.0, 2.0), input_tokens=12, output_tokens=5)
            cfg = LoadConfig(target_url=t.url, artifact_path=str(save_artifact(art, tmp_path)), run_id="remote-test",
                             results_dir=str(tmp_path / "results"), progress=False, remote_workers=2, master_port=port,
                             worker_wait_s=60.0)
            run = Run(run_load(cfg, tmp_path, progress=None, timeout_s=180))
        for w in workers:
            w.wait(timeout=30)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    df = run.table("requests")
    assert sorted(df["request_index"]) == list(range(art.count)) and set(df["error_class"]) == {"ok"}
    assert set(df["worker_index"]) == {0, 1}
    clocks = run.manifest.extra["clock_offsets"]
    assert set(clocks) == {"0", "1"} and all(abs(c["offset_ns"]) <= c["rtt_ns"] / 2 + 1_000_000 for c in clocks.values())
    assert run.manifest.extra["remote_workers"] == 2
