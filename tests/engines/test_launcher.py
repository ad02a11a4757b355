"""Launcher core against a stand-in engine: health polling, time-to-ready order, failures, and stopping the whole process group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from harness.engines.launcher import LaunchPlan, ProcessSpec, RunningEngine, free_port
from harness.errors import HarnessError

FAKE = Path(__file__).with_name("fake_engine.py")


def fake_plan(port: int, *args: str, timeout_s: float = 20.0, stop_timeout_s: float = 5.0) -> LaunchPlan:
    argv = (sys.executable, str(FAKE), "--port", str(port), "--lifetime-s", "60", *args)
    proc = ProcessSpec("server", argv, "127.0.0.1", port, metrics_path="/metrics")
    return LaunchPlan("fake", "fake", "single", (proc,), proc.base_url, "fake-model", {"name": "fake"},
                      startup_timeout_s=timeout_s, poll_interval_s=0.05, stop_timeout_s=stop_timeout_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_time_to_ready_orders_spawn_healthy_first_request(tmp_path):
    port = free_port()
    with RunningEngine(fake_plan(port, "--loading-s", "0.5"), log_dir=tmp_path) as eng:
        t = eng.time_to_ready
        # health answered 503 for 0.5 s after the server started: healthy cannot come sooner
        assert t.healthy_s >= 0.5
        assert t.first_request_s >= t.healthy_s
        assert t.ready_s == t.first_request_s
        assert t.per_process_healthy_s == {"server": t.healthy_s}
        assert t.probe_response["usage"]["completion_tokens"] == 1
        assert 0 < t.probe_latency_s <= t.first_request_s - t.healthy_s + 1e-6
    assert (tmp_path / "server.log").is_file()


def test_stop_kills_the_process_group(tmp_path):
    port = free_port()
    pid_file = tmp_path / "child.pid"
    eng = RunningEngine(fake_plan(port, "--child-pid-file", str(pid_file)), log_dir=tmp_path)
    with eng:
        leader = eng.procs[0][1].pid
        deadline = time.monotonic() + 5
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert alive(leader) and alive(child)
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(leader)
    assert not alive(child), "the forked child survived: stop must signal the whole process group"


def test_sigterm_ignored_then_killed(tmp_path):
    port = free_port()
    eng = RunningEngine(fake_plan(port, "--ignore-sigterm", stop_timeout_s=0.5), log_dir=tmp_path)
    eng.start()
    leader = eng.procs[0][1].pid
    t0 = time.monotonic()
    codes = eng.stop()
    assert codes["server"] == -9  # SIGKILL after stop_timeout_s
    assert time.monotonic() - t0 < 5
    assert not alive(leader)


def test_exit_before_healthy_reports_the_log(tmp_path):
    port = free_port()
    with pytest.raises(HarnessError, match=r"exited with code 3 before it was healthy(.|\n)*failing on purpose"):
        with RunningEngine(fake_plan(port, "--exit-at-once", "3"), log_dir=tmp_path):
            pass


def test_not_healthy_in_time_is_stopped(tmp_path):
    port = free_port()
    eng = RunningEngine(fake_plan(port, "--loading-s", "30", timeout_s=0.8), log_dir=tmp_path)
    with pytest.raises(HarnessError, match=r"not healthy within startup.timeout_s = 0.8 s"):
        with eng:
            pass
    assert eng.procs == []  # stopped


def test_failed_first_request(tmp_path):
    port = free_port()
    with pytest.raises(HarnessError, match="first request failed with HTTP 500"):
        with RunningEngine(fake_plan(port, "--fail-completions"), log_dir=tmp_path):
            pass


def test_missing_command(tmp_path):
    proc = ProcessSpec("server", ("/nonexistent/llama-server",), "127.0.0.1", free_port())
    plan = LaunchPlan("x", "llama.cpp", "single", (proc,), proc.base_url, "m", {})
    with pytest.raises(HarnessError, match="not found for server"):
        with RunningEngine(plan, log_dir=tmp_path):
            pass
