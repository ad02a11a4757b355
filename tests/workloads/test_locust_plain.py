"""`locust -f workloads/locustfile.py` as Locust users run it: headless local (closed and open loop), and a master
with two workers on other loopback addresses, one with its wall clock off by 250 ms. Each run is bounded in time
and must deliver every scheduled request."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.store import Run
from harness.target.process import start_target

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = str(ROOT / "workloads" / "locustfile.py")


@pytest.fixture(scope="module")
def target():
    t = start_target(["--profile", "fixed", "--ttft-s", "0.02", "--itl-s", "0.005"], max_lifetime_s=300)
    yield t
    t.stop()


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _locust(*args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", LOCUSTFILE, *args], env=env or _env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _one_run(results: Path) -> Run:
    (m,) = list(results.glob("*/*/manifest.json"))
    return Run(m.parent)


def test_headless_closed_loop(tmp_path, target):
    p = _locust("--host", target.url, "--headless", "-u", "3", "-r", "3", "-t", "60s", "--num-requests", "15",
                "--input-tokens", "16", "--output-tokens", "8", "--results", str(tmp_path), "--only-summary")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    run = _one_run(tmp_path)
    df = run.table("requests")
    assert sorted(df["request_index"]) == list(range(15)) and set(df["error_class"]) == {"ok"}
    assert (df["output_tokens_chunks"] == 8).all()
    assert run.manifest.extra["load_mode"] == "closed-loop" and run.manifest.status == "complete"
    assert "harness: 15 requests sent (15 ok, 0 failed)" in out and "VALID" in out
    # closed loop: each send is its own intended instant, at most 3 in flight at once
    assert (df["schedule_lag_s"].abs() < 0.05).all()


def test_headless_open_loop_config_file(tmp_path, target):
    conf = tmp_path / "locust.conf"
    conf.write_text(f"host = {target.url}\nheadless = true\nusers = 8\nspawn-rate = 8\nrun-time = 60s\nrequest-rate = 6\n"
                    f"duration-s = 2\nschedule = constant\ninput-tokens = uniform:min=8,max=24\noutput-tokens = 6\n"
                    f"results = {tmp_path}\nonly-summary = true\n")
    p = _locust("--config", str(conf))
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    run = _one_run(tmp_path)
    df = run.table("requests")
    assert sorted(df["request_index"]) == list(range(12)) and set(df["error_class"]) == {"ok"}
    assert run.manifest.extra["load_mode"] == "open-loop"
    gaps_s = df["intended_ns"].sort_values().diff().dropna() / 1e9
    assert gaps_s.sub(1 / 6).abs().max() < 1e-6  # the constant schedule at 6/s, from the config file


def test_master_and_two_workers_on_other_addresses(tmp_path, target):
    master = _locust("--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", "0", "--expect-workers", "2",
                     "--host", target.url, "--headless", "-u", "6", "-r", "6", "-t", "90s", "--request-rate", "8",
                     "--duration-s", "3", "--schedule", "constant", "--input-tokens", "12", "--output-tokens", "6",
                     "--results", str(tmp_path), "--only-summary", "--loglevel", "INFO",
                     env=_env(HARNESS_LOCUST_HEARTBEAT_LIVENESS="30"))  # a 2-core machine shared with other work starves workers
    port = _listening_port(master.pid)  # Locust does not print the free port it bound
    workers = []
    try:
        for addr, skew in (("127.0.0.2", "0"), ("127.0.0.3", str(250_000_000))):
            # ZMQ's "source;destination" form pins each worker's connection to its own loopback address
            workers.append(_locust("--worker", "--master-host", f"{addr}:0;127.0.0.1", "--master-port", str(port),
                                   env=_env(HARNESS_TEST_CLOCK_SKEW_NS=skew)))
        out, _ = master.communicate(timeout=150)
        # exit 1 only if the run is INVALID, which a busy machine can cause by delaying sends (lag); never for lost requests
        assert master.returncode == 0 or ("schedule lag" in out and "lost" not in out), out
        for w in workers:
            w.wait(timeout=30)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
                p.wait()
    run = _one_run(tmp_path)
    df = run.table("requests")
    assert sorted(df["request_index"]) == list(range(24)) and set(df["error_class"]) == {"ok"}, out
    assert set(df["worker_index"]) == {0, 1}
    clocks = run.manifest.extra["clock_offsets"]
    assert set(clocks) == {"0", "1"}
    skewed = [c for c in clocks.values() if abs(c["offset_ns"]) > 100_000_000]
    assert len(skewed) == 1 and abs(skewed[0]["offset_ns"] + 250_000_000) <= skewed[0]["rtt_ns"] / 2 + 1_000_000
    # the skewed worker's t0 was mapped through its measured offset: on the target's clock (the same CLOCK_MONOTONIC as
    # every process here), first-token emit − the record's send time (ns since that process's t0) is t0 + a constant
    # (network + the 20 ms TTFT), the same for both workers; uncorrected, the skewed worker's would differ by 250 ms.
    # (Send lag on a busy machine moves both terms alike, so this holds whatever the lag.)
    import json as _json
    import urllib.request

    with urllib.request.urlopen(target.url + "/harness/emit_log", timeout=30) as r:
        log = _json.loads(r.read())
    first = {}
    for ri, ti, en in zip(log["request_index"], log["token_index"], log["emit_ns"]):
        if ti == 0:
            first[log["request_ids"][ri]] = en
    t0_seen_s = (df["response_id"].map(first) - df["sent_ns"]) / 1e9
    by_worker = t0_seen_s.groupby(df["worker_index"]).median()
    assert abs(by_worker[0] - by_worker[1]) < 0.05, (by_worker, clocks)


def _listening_port(pid: int, timeout_s: float = 60.0) -> int:
    """The master's ZMQ port (bound to a free one): the TCP socket the master process listens on, from /proc."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        inodes = set()
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes and f[1].startswith("0100007F"):
                return int(f[1].split(":")[1], 16)
        time.sleep(0.2)
    raise AssertionError("the Locust master did not start listening")


def test_web_ui_on_a_chosen_host(tmp_path, target):
    import time
    import urllib.request

    port = _free_port("127.0.0.2")
    p = _locust("--host", target.url, "--web-host", "127.0.0.2", "--web-port", str(port), "--autostart", "--autoquit", "0",
                "-u", "2", "-r", "2", "-t", "8s", "--num-requests", "6", "--input-tokens", "8", "--output-tokens", "4",
                "--results", str(tmp_path))
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and status is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.2:{port}/", timeout=2) as r:
                    status = r.status
            except OSError:
                time.sleep(0.3)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert status == 200, out
    df = _one_run(tmp_path).table("requests")
    assert sorted(df["request_index"]) == list(range(6)) and set(df["error_class"]) == {"ok"}


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def test_sigterm_mid_run_keeps_cancelled_records(tmp_path, target):
    import signal
    import time

    p = _locust("--host", target.url, "--headless", "-u", "6", "-r", "6", "-t", "120s", "--request-rate", "3", "--duration-s", "30",
                "--input-tokens", "8", "--output-tokens", "400", "--results", str(tmp_path), "--only-summary")
    lines = []
    deadline = time.monotonic() + 60
    for line in p.stdout:
        lines.append(line)
        if "All users spawned" in line or time.monotonic() > deadline:
            break
    time.sleep(3)  # requests stream for ~2 s each: some are in flight now
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    out = "".join(lines) + out
    assert "interrupted:" in out and "harness report" in out, out
    run = _one_run(tmp_path)
    assert run.manifest.status == "failed"
    df = run.table("requests")
    classes = set(df["error_class"])
    assert df["request_index"].is_unique and len(df) == len(run.table("workload"))
    assert "cancelled" in classes and classes <= {"ok", "cancelled", "not_sent"}


def test_headless_plain_locust_reports_a_closed_loop_of_its_users(tmp_path, target):
    """Issue 48.7: `locust -f workloads/locustfile.py -u 4 -r 4 -t 8s` with its default pool of 1000: the run is the
    users' closed loop, labelled with them, complete at its run time; what was sent is what is counted (the pool's
    unused rest is not a failure), no request goes before t0, and the report says all of it."""
    p = _locust("--host", target.url, "--headless", "-u", "4", "-r", "4", "-t", "8s", "--input-tokens", "16",
                "--output-tokens", "40", "--results", str(tmp_path), "--only-summary")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    run = _one_run(tmp_path)
    m = run.manifest
    assert m.status == "complete" and m.extra["load_mode_label"] == "closed-loop (Locust: 4 users, spawn rate 4/s)"
    df = run.table("requests")
    sent = df[df["error_class"] != "not_sent"]
    assert (sent["intended_ns"] >= 0).all()
    from workloads.summary import read_summary

    s = read_summary(run).load
    assert s.valid and s.error_fraction == 0.0 and s.requests_sent == len(sent) < 1000
    assert s.errors_by_class.get("ok", 0) + s.errors_by_class.get("run_ended", 0) == len(sent)
    n_ok = s.errors_by_class["ok"]
    head = next(ln for ln in out.splitlines() if ln.startswith("harness: ") and "requests sent" in ln)
    assert head.startswith(f"harness: {len(sent)} requests sent ({n_ok} ok, 0 failed") and "of the pool unused" in head
    # every successful request is in the latency figures or its leaving out is said
    assert s.requests_ok == n_ok or f"{n_ok - s.requests_ok} successful requests sent outside the window" in out
    from harness.report.bench_pd import render

    md = next(p for p in render(run.path, tmp_path / "report") if p.name == "summary.md").read_text()
    assert md.startswith(f"# locust — closed-loop (Locust: 4 users, spawn rate 4/s) — {m.run_id}")
    assert "status complete · closed-loop (Locust: 4 users, spawn rate 4/s) · VALID" in md
    assert f"{len(sent)} requests sent of a pool of 1000" in md and "not_sent" not in md.split("| errors |")[1].split("|")[0]
    assert "achieved" not in md and "schedule lag" not in md
    assert "SIMULATED" in md  # the fixed-timing target says it is simulated


def _web_ui(target, results):
    """A Locust web UI on a free port of 127.0.0.1: (process, base URL, the page's text after two loads: two parser
    builds)."""
    import time
    import urllib.request

    port = _free_port("127.0.0.1")
    p = _locust("--host", target.url, "--web-host", "127.0.0.1", "--web-port", str(port), "--results", str(results))
    base, page = f"http://127.0.0.1:{port}", ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not page:
        try:
            for _ in range(2):
                with urllib.request.urlopen(base + "/", timeout=5) as r:
                    page = r.read().decode()
        except OSError:
            time.sleep(0.3)
    return p, base, page


def _sigterm(p) -> str:
    import signal

    try:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return out


def test_web_ui_shows_the_options_once_and_an_unsent_stop_is_not_complete(tmp_path, target):
    """Issue 48.8: every page load rebuilds Locust's parser; the harness's options are registered once (no argparse
    conflict) and shown in the UI. A run started from the UI with the UI's options, then stopped before its first
    request was due, is marked failed, not complete."""
    import time
    import urllib.parse
    import urllib.request

    from workloads.artifact import save_artifact
    from workloads.schedule import Schedule
    from workloads.workload_spec import WorkloadSpec, build_workload

    late = build_workload(WorkloadSpec(), Schedule("trace", np.array([30.0, 31.0]), 0, {"duration_s": 40.0}), name="late",
                          default_input_tokens=8, default_output_tokens=4)
    art = save_artifact(late, tmp_path)
    p, base, page = _web_ui(target, tmp_path / "r")
    try:
        assert '"extra_options": {}' not in page and '"request_rate"' in page and '"input_tokens"' in page, page[:2000]
        form = {"user_count": "2", "spawn_rate": "2", "host": target.url, "workload": str(art)}
        with urllib.request.urlopen(urllib.request.Request(base + "/swarm", data=urllib.parse.urlencode(form).encode()), timeout=60) as r:
            assert json.loads(r.read())["success"]
        time.sleep(3)  # the first request is due at 30 s
        with urllib.request.urlopen(urllib.request.Request(base + "/stop", data=b""), timeout=60) as r:
            assert json.loads(r.read())["success"]
        time.sleep(2)
    finally:
        out = _sigterm(p)
    assert "conflicting option string" not in out and "Traceback" not in out, out
    assert list((tmp_path / "r").glob("*/*/manifest.json")), out
    run = _one_run(tmp_path / "r")
    assert run.manifest.status == "failed" and any("before any request was sent" in n for n in run.manifest.notes), run.manifest
    assert "harness: 0 requests sent" in out


def test_web_ui_quit_without_a_start_writes_no_run(tmp_path, target):
    p, _, page = _web_ui(target, tmp_path / "r")
    out = _sigterm(p)
    assert page and not list((tmp_path / "r").glob("*/*/manifest.json")), out  # nothing measured, nothing marked complete
