"""The harness's messages on Locust's own master/worker protocol: one run's workload, t0, clocks and records.

Workers are plain Locust workers (`locust -f workloads/locustfile.py --worker --master-host H`), on this
host or others; the master is `harness bench-pd` (workloads.loadrun) or `locust -f ... --master`. On top
of Locust's messages (runner.register_message / send_message) a run adds:

  master -> worker  harness_setup   {index, count, config, artifact}: the load config and the workload
                                    artifact's parquet bytes (hash-checked on load), so a remote worker
                                    needs no files but the code
  worker -> master  harness_ping    {seq, t1}; master -> worker harness_pong {seq, t1, t2}: the clock
                                    offset, workloads.clock (CLOCK_PINGS round trips, the fastest kept)
  worker -> master  harness_ready   {index, clock, host, pid}
  master -> worker  harness_t0      {t0_unix_ns}: the run's t0 on the master's wall clock
  worker -> master  harness_records {worker, rows, sent, final}: every second, and once more (final)
                                    when the worker stops
  master -> worker  harness_stop    {reason}: record every request in flight as cancelled and send
                                    the final records
Records carry times relative to t0, so rows from every host merge into one run; each worker's
measured offset and round trip are stored in the run's manifest (`clock_offsets`).
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import gevent
import gevent.queue

from harness.errors import HarnessError
from workloads.artifact import load_artifact
from workloads.clock import ClockOffset, estimate_offset, wall_ns
from workloads.config import LoadConfig
from workloads.loadstate import LoadState, set_state

MSG_SETUP, MSG_PING, MSG_PONG, MSG_READY = "harness_setup", "harness_ping", "harness_pong", "harness_ready"
MSG_T0, MSG_RECORDS, MSG_STOP = "harness_t0", "harness_records", "harness_stop"
CLOCK_PINGS = 16
FLUSH_EVERY_S = 1.0
PONG_TIMEOUT_S = 10.0


def apply_heartbeat_liveness() -> None:
    """HARNESS_LOCUST_HEARTBEAT_LIVENESS=N (on the master): how many 1 s heartbeats a worker may miss before the master
    counts it missing (Locust's default 3). A worker process starved of CPU (an overloaded load host) misses a few and
    Locust then stops the test; raise it there."""
    v = os.environ.get("HARNESS_LOCUST_HEARTBEAT_LIVENESS")
    if not v:
        return
    try:
        n = int(v)
        if not 1 <= n <= 3600:
            raise ValueError
    except ValueError:
        raise HarnessError(f"HARNESS_LOCUST_HEARTBEAT_LIVENESS must be an integer number of heartbeats in [1, 3600], got {v!r}.") from None
    # lazy: importing locust (~0.5 s) monkey-patches the importing process; only the load process may
    import locust.runners

    locust.runners.HEARTBEAT_LIVENESS = n


class WorkerSide:
    """Installed on a Locust worker (locustfile's init hook): waits for the master's setup, then runs its share."""

    def __init__(self, environment: Any, configure_user: Callable[[Any], None]):
        self.env = environment
        self.runner = environment.runner
        self.configure_user = configure_user
        self.pongs: gevent.queue.Queue = gevent.queue.Queue()
        self.clock: ClockOffset | None = None
        self.state: Any = None
        self.index = -1
        self.final_sent = False
        self._cpu0: float | None = None
        self._flusher: Any = None
        r = self.runner
        r.register_message(MSG_SETUP, self._on_setup, concurrent=True)
        r.register_message(MSG_PONG, lambda environment, msg, **_: self.pongs.put(msg.data))
        r.register_message(MSG_T0, self._on_t0)
        r.register_message(MSG_STOP, lambda environment, msg, **_: self.send_final(str(msg.data.get("reason", "stopped")),
                                                                             str(msg.data.get("error_class", "cancelled"))))
        environment.events.test_stopping.add_listener(lambda **_: self.send_final("the worker was stopped"))
        environment.events.quitting.add_listener(lambda **_: self.send_final("the worker quit"))

    def _on_setup(self, environment: Any, msg: Any, **_: Any) -> None:
        d = msg.data
        self.index = int(d["index"])
        try:
            tmp = Path(tempfile.mkdtemp(prefix="harness-worker-"))
            art_path = tmp / "workload.parquet"
            art_path.write_bytes(d["artifact"])
            art = load_artifact(art_path)
            cfg = LoadConfig.from_dict({**d["config"], "artifact_path": str(art_path)})
            self.configure_user(cfg)
            self.state = LoadState(cfg, self.index, int(d["count"]), artifact=art)
            art_path.unlink()
            tmp.rmdir()
            self.clock = self._sync_clock()
        except Exception as exc:  # noqa: BLE001 - reported to the master, which names it and stops the run
            self.runner.send_message(MSG_READY, {"index": self.index, "error": f"{type(exc).__name__}: {exc}",
                                                 "host": socket.gethostname()})
            return
        set_state(self.state)
        self.runner.send_message(MSG_READY, {"index": self.index, "clock": self.clock.to_dict(), "host": socket.gethostname(),
                                             "pid": os.getpid()})
        self._flusher = gevent.spawn(self._flush_loop)

    def _sync_clock(self) -> ClockOffset:
        samples = []
        for seq in range(CLOCK_PINGS):
            self.runner.send_message(MSG_PING, {"seq": seq, "t1": wall_ns(), "index": self.index})
            try:
                pong = self.pongs.get(timeout=PONG_TIMEOUT_S)
            except gevent.queue.Empty:
                raise HarnessError(f"no clock reply from the master within {PONG_TIMEOUT_S:g} s") from None
            samples.append((int(pong["t1"]), int(pong["t2"]), wall_ns()))
        return estimate_offset(samples)

    def _on_t0(self, environment: Any, msg: Any, **_: Any) -> None:
        self._cpu0 = time.process_time()  # this worker's CPU during the load is counted from here
        if self.state is not None:
            self.state.set_t0_unix_ns(int(msg.data["t0_unix_ns"]), self.clock.offset_ns if self.clock else 0)

    def _send(self, final: bool) -> None:
        st = self.state
        rows = st.drain()
        cpu_s = time.process_time() - self._cpu0 if self._cpu0 is not None else None
        self.runner.send_message(MSG_RECORDS, {"worker": self.index, "rows": rows, "sent": st.sent, "final": final, "cpu_s": cpu_s})

    def _flush_loop(self) -> None:
        while not self.final_sent:
            gevent.sleep(FLUSH_EVERY_S)
            if not self.final_sent:
                self._send(False)

    def send_final(self, reason: str, error_class: str = "cancelled") -> None:
        """Record what is in flight as cancelled (or run_ended) and send every record left, once."""
        if self.state is None or self.final_sent:
            return
        self.final_sent = True
        self.state.cancel_in_flight(f"{error_class}: {reason}", "run_ended" if error_class == "run_ended" else "cancelled")
        try:
            self._send(True)
        except Exception:  # noqa: BLE001 - the master is gone; nothing left to send to
            pass


class MasterSide:
    """Installed on the master runner: hands out the workload, answers clock pings, collects records."""

    def __init__(self, runner: Any, on_rows: Callable[[list[dict[str, Any]]], None]):
        apply_heartbeat_liveness()
        self.runner = runner
        self.on_rows = on_rows
        self.ready: dict[int, dict[str, Any]] = {}
        self.sent_by_worker: dict[int, int] = {}
        self.final: set[int] = set()
        self.cpu_by_worker: dict[int, float] = {}  # each worker's CPU seconds since t0, as of its latest message
        runner.register_message(MSG_PING, self._on_ping)
        runner.register_message(MSG_READY, self._on_ready)
        runner.register_message(MSG_RECORDS, self._on_records)

    def _on_ping(self, environment: Any, msg: Any, **_: Any) -> None:
        d = msg.data
        self.runner.send_message(MSG_PONG, {"seq": d["seq"], "t1": d["t1"], "t2": wall_ns()}, client_id=msg.node_id)

    def _on_ready(self, environment: Any, msg: Any, **_: Any) -> None:
        self.ready[int(msg.data["index"])] = {**msg.data, "client_id": msg.node_id}

    def _on_records(self, environment: Any, msg: Any, **_: Any) -> None:
        d = msg.data
        self.on_rows(d["rows"])
        self.sent_by_worker[int(d["worker"])] = int(d["sent"])
        if d.get("cpu_s") is not None:
            self.cpu_by_worker[int(d["worker"])] = float(d["cpu_s"])
        if d.get("final"):
            self.final.add(int(d["worker"]))

    @property
    def sent(self) -> int:
        return sum(self.sent_by_worker.values())

    def setup_workers(self, config: dict[str, Any], artifact_bytes: bytes, timeout_s: float) -> dict[str, dict[str, Any]]:
        """Send every connected worker its index, the config and the workload; wait until each has measured its clock.
        Returns {worker index: {host, pid, offset_ns, rtt_ns, samples}}."""
        clients = sorted(c.id for c in self.runner.clients.all)
        if not clients:
            raise HarnessError("no Locust worker is connected to the master; start workers with "
                               "`locust -f workloads/locustfile.py --worker --master-host HOST` (docs/loadgen.md).")
        for i, cid in enumerate(clients):
            self.runner.send_message(MSG_SETUP, {"index": i, "count": len(clients), "config": config, "artifact": artifact_bytes},
                                     client_id=cid)
        deadline = gevent.Timeout(timeout_s)
        deadline.start()
        try:
            while len(self.ready) < len(clients):
                gevent.sleep(0.05)
        except gevent.Timeout:
            missing = sorted(set(range(len(clients))) - set(self.ready))
            raise HarnessError(f"Locust worker(s) {missing} did not finish setup within {timeout_s:g} s "
                               "(their logs say why; each worker needs this harness installed and the API key variable set).") from None
        finally:
            deadline.close()
        bad = {i: r["error"] for i, r in self.ready.items() if r.get("error")}
        if bad:
            i, e = next(iter(bad.items()))
            raise HarnessError(f"Locust worker {i} on {self.ready[i].get('host')} could not set up the run: {e}")
        return {str(i): {"host": r.get("host"), "pid": r.get("pid"), **r["clock"]} for i, r in sorted(self.ready.items())}

    def send_t0(self, t0_unix_ns: int) -> None:
        self.runner.send_message(MSG_T0, {"t0_unix_ns": int(t0_unix_ns)})

    def stop_workers(self, reason: str, timeout_s: float = 5.0, error_class: str = "cancelled") -> list[int]:
        """Ask every worker to cancel what is in flight and send its last records; returns the workers that did not."""
        self.runner.send_message(MSG_STOP, {"reason": reason, "error_class": error_class})
        t = gevent.Timeout(timeout_s)
        t.start()
        try:
            while len(self.final) < len(self.ready):
                gevent.sleep(0.05)
        except gevent.Timeout:
            pass
        finally:
            t.close()
        return sorted(set(self.ready) - self.final)
