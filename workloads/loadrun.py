"""The load process: Locust (local, or a master with N workers on 127.0.0.1) driving one run into results/.

`python -m workloads.loadrun CONFIG.json` runs the local or master side and owns the run directory
(harness.store.RunWriter): records arrive from this process's users or from the workers (Locust
messages) and are appended in parts every couple of seconds by a low-priority writer process
(harness.store_process, so parquet encoding never holds this process's GIL), server metrics are scraped alongside,
and progress is printed as one JSON line a second. `--worker I` runs worker I of N. The run ends
when every request has a record or at t0 + schedule span + drain timeout; anything missing then is
recorded as "not_sent" or "lost", so every request of the workload ends as a record.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402
from time import perf_counter_ns  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import locust  # noqa: E402,F401 - imported for its gevent setup before anything else touches sockets
from locust.env import Environment  # noqa: E402

from harness.errors import HarnessError  # noqa: E402
from harness.store_process import AppendProcess  # noqa: E402
from workloads.config import LoadConfig  # noqa: E402
from workloads.loadstate import LoadState, set_state  # noqa: E402
from workloads.locustfile import OpenAIStreamUser  # noqa: E402
from workloads.records import missing_record  # noqa: E402

FLUSH_EVERY_S = 2.0
WORKER_READY_TIMEOUT_S = 60.0
RECENT_TTFT_N = 1000  # the running TTFT p50 of the progress line is over the last this many successes


def _configure_user(cfg: LoadConfig) -> None:
    OpenAIStreamUser.host = cfg.target_url
    OpenAIStreamUser.network_timeout = cfg.request_timeout_s
    OpenAIStreamUser.connection_timeout = min(30.0, cfg.request_timeout_s)


def _scrub(rows: list[dict[str, Any]], key: str | None) -> list[dict[str, Any]]:
    if key:
        for r in rows:
            d = r.get("error_detail")
            if d and key in d:
                r["error_detail"] = d.replace(key, "***")
    return rows


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fetch_json(url: str, timeout_s: float = 30.0) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - the URL was checked to be http(s)
        return json.loads(r.read())


class _Coordinator:
    """Local or master side: owns the RunWriter, collects records, decides when the run is over."""

    def __init__(self, cfg: LoadConfig, config_path: str):
        from harness.records import new_manifest
        from harness.store import RunWriter
        from workloads.artifact import load_artifact

        self.cfg = cfg
        self.config_path = config_path
        self.key = cfg.api_key()
        self.artifact = load_artifact(cfg.artifact_path)
        self.items = {int(r["request_index"]): r for r in self.artifact.rows}
        sched = self.artifact.meta.get("schedule", {})
        self.span_s = float(sched.get("span_s") or max((r["intended_s"] for r in self.artifact.rows if r["turn"] == 0), default=0.0))
        extra = dict(cfg.manifest_extra)
        command_line = extra.pop("command_line", None)
        extra.update({"target_url": cfg.target_url, "workload": self.artifact.summary(), "workers": cfg.workers,
                      "max_concurrency": cfg.max_concurrency, "request_timeout_s": cfg.request_timeout_s,
                      "api_key_env": cfg.api_key_env, "api_key_sent": bool(self.key), "summary_options": asdict(cfg.summary),
                      "clock": "times in ns since t0 on perf_counter (CLOCK_MONOTONIC)"})
        manifest = new_manifest("load", run_id=cfg.run_id, seeds={"workload": int(self.artifact.meta.get("seed", 0))},
                                engine=cfg.engine, extra=extra, command_line=command_line)
        self.writer = RunWriter(manifest, cfg.results_dir)
        self.buffer: list[dict[str, Any]] = []
        self.all_records: list[dict[str, Any]] = []
        self.seen: set[int] = set()
        self.sent_by_worker: dict[int, int] = {}
        self.t0_ns = 0
        self.t0_unix_ns = 0
        self.stop_requested = False
        self.client_cpu_s = self.load_wall_s = 0.0
        self.parts: AppendProcess | None = None
        self.parts_report: dict[str, Any] = {}
        self.errors = 0
        self.recent_ttft_s: deque[float] = deque(maxlen=RECENT_TTFT_N)  # the progress line's running TTFT p50

    def add(self, rows: list[dict[str, Any]]) -> None:
        rows = _scrub(rows, self.key)
        for r in rows:
            self.seen.add(int(r["request_index"]))
            if r["error_class"] != "ok":
                self.errors += 1
            elif r.get("ttft_s") is not None:
                self.recent_ttft_s.append(float(r["ttft_s"]))
        self.buffer.extend(rows)
        self.all_records.extend(rows)

    def append(self, table: str, rows: Any) -> None:
        """Hand rows to the part writer process while the load runs (harness.store_process: encoding a part
        holds the GIL for ~10 ms, which on this process would delay every stream's arrival stamps), and
        write them here before and after it."""
        if self.parts is not None:
            self.parts.append(table, rows)
        else:
            self.writer.append(table, rows)

    def flush(self) -> None:
        if self.buffer:
            rows, self.buffer = self.buffer, []
            self.append("requests", rows)

    def progress(self, sent: int) -> None:
        if not self.cfg.progress:
            return
        ttft = sorted(self.recent_ttft_s)  # at most RECENT_TTFT_N values: ~0.1 ms once a second
        print(json.dumps({"progress": {"t_s": round((perf_counter_ns() - self.t0_ns) / 1e9, 2), "span_s": self.span_s,
                                       "sent": sent, "done": len(self.seen), "expected": len(self.items), "errors": self.errors,
                                       "ttft_p50_s": ttft[len(ttft) // 2] if ttft else None, "ttft_n": len(ttft)}}),
              flush=True)

    def run(self) -> int:
        from harness.telemetry.prometheus import Scraper

        cfg = self.cfg
        with self.writer:
            self.writer.append("workload", self.artifact.table_rows())
            if cfg.plan_path:
                self.writer.write_json("plan.json", json.loads(Path(cfg.plan_path).read_text()))
            _configure_user(cfg)
            env = Environment(user_classes=[OpenAIStreamUser], host=cfg.target_url)
            procs: list[subprocess.Popen] = []
            try:
                self.parts = AppendProcess(self.writer)
                if cfg.workers == 0:
                    state = set_state(LoadState(cfg, 0, 1))
                    runner = env.create_local_runner()
                else:
                    state = None
                    port = _free_port()
                    runner = env.create_master_runner(master_bind_host="127.0.0.1", master_bind_port=port)
                    runner.register_message("harness_records", self._on_records)
                    for i in range(cfg.workers):
                        procs.append(subprocess.Popen([sys.executable, "-m", "workloads.loadrun", self.config_path,
                                                       "--worker", str(i), "--master-port", str(port)]))
                    deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
                    while len(runner.clients.ready) < cfg.workers:
                        if time.monotonic() > deadline:
                            raise HarnessError(f"only {len(runner.clients.ready)} of {cfg.workers} Locust workers connected "
                                               f"within {WORKER_READY_TIMEOUT_S:g} s.")
                        gevent.sleep(0.1)
                scraper = Scraper(cfg.scrape, lambda rows: self.append("server_metrics", rows), cfg.scrape_interval_s,
                                  t0_fn=lambda: self.t0_ns / 1e9)
                self.t0_unix_ns = time.time_ns() + int(cfg.t0_lead_s * 1e9)
                self.t0_ns = perf_counter_ns() + (self.t0_unix_ns - time.time_ns())
                self.writer.update_manifest(extra={**self.writer.manifest.extra, "t0_unix_ns": self.t0_unix_ns})
                if state is not None:
                    state.set_t0_unix_ns(self.t0_unix_ns)
                else:
                    runner.send_message("harness_t0", {"t0_unix_ns": self.t0_unix_ns})
                users = max(1, min(cfg.max_concurrency, len(self.artifact.sessions())))
                runner.start(users, spawn_rate=max(users, 1000))
                scraper.start()
                cpu0, wall0 = time.process_time(), time.perf_counter()
                self._wait(runner, state)
                self.client_cpu_s, self.load_wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
                scraper.stop()
                runner.quit()
                self._finish(state)
                self._close_parts()
                self._fetch_emit_log()
            except BaseException:
                try:  # keep what was measured; the error that ended the run is the one to report
                    self._close_parts()
                except Exception:  # noqa: BLE001
                    pass
                raise
            finally:
                for p in procs:
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            from harness.store import Run
            from workloads.summary import summarise_run, summary_document

            # from the stored table, not the records in memory: a killed or imported run summarises the same way
            summary = summarise_run(Run(self.writer.path), options=cfg.summary, span_s=self.span_s)
            writer_cpu_s = float(self.parts_report.get("writer_cpu_s", 0.0))
            self.writer.write_json("summary.json", summary_document(
                summary, span_s=self.span_s, options=cfg.summary,
                # client cost per token: CPU of this process (all users when workers == 0) while the load ran,
                # plus the part writer process's CPU for encoding and writing the records (its start-up excluded)
                client_process={"cpu_s": self.client_cpu_s + writer_cpu_s, "load_process_cpu_s": self.client_cpu_s,
                                "part_writer_cpu_s": writer_cpu_s, "wall_s": self.load_wall_s, "workers": cfg.workers},
            ))
            if self.stop_requested:
                raise KeyboardInterrupt("load run interrupted; the records measured so far are kept")
        print(json.dumps({"run_dir": str(self.writer.path), "valid": summary.valid}), flush=True)
        return 0

    def _close_parts(self) -> None:
        if self.parts is None:
            return
        parts, self.parts = self.parts, None
        self.parts_report = parts.close()
        if self.parts_report.get("note"):
            self.writer.update_manifest(notes=[*self.writer.manifest.notes, self.parts_report["note"]])

    def _on_records(self, environment: Any, msg: Any, **_: Any) -> None:
        data = msg.data
        self.add(data["rows"])
        self.sent_by_worker[int(data["worker"])] = int(data["sent"])

    def _wait(self, runner: Any, state: LoadState | None) -> None:
        end_ns = self.t0_ns + int((self.span_s + self.cfg.drain_timeout_s) * 1e9)
        last_flush = last_progress = time.monotonic()
        while True:
            if state is not None:
                self.add(state.drain())
                sent = state.sent
            else:
                sent = sum(self.sent_by_worker.values())
            now = time.monotonic()
            if now - last_flush >= FLUSH_EVERY_S:
                self.flush()
                last_flush = now
            if now - last_progress >= 1.0:
                self.progress(sent)
                last_progress = now
            if len(self.seen) >= len(self.items) or perf_counter_ns() >= end_ns or self.stop_requested:
                break
            gevent.sleep(0.1)
        self.progress(sent)

    def _finish(self, state: LoadState | None) -> None:
        if state is not None:
            self.add(state.drain())
            unstarted = {int(r["request_index"]) for s in state.unstarted_sessions() for r in s}
        else:
            gevent.sleep(0.5)  # let the workers' last messages land
            unstarted = set()
        missing = [i for i in self.items if i not in self.seen]
        rows = []
        for i in missing:
            cls = "not_sent" if i in unstarted else "lost"
            detail = ("its send time never came before the run's deadline" if cls == "not_sent"
                      else "no result before the run's deadline (still in flight, or its worker died)")
            rows.append(missing_record(self.items[i], cls, worker_index=-1, detail=detail))
        self.add(rows)
        self.flush()

    def _fetch_emit_log(self) -> None:
        if not self.cfg.fetch_emit_log:
            return
        try:
            log = _fetch_json(self.cfg.target_url + "/harness/emit_log", timeout_s=60.0)
        except Exception as exc:  # noqa: BLE001 - the ground-truth log is optional
            self.writer.update_manifest(notes=[*self.writer.manifest.notes, f"target emit log unavailable: {exc}"])
            return
        ids = log["request_ids"]
        ri, ti, en, sn = log["request_index"], log["token_index"], log["emit_ns"], log["scheduled_ns"]
        step = 500_000
        for a in range(0, len(en), step):
            b = a + step
            self.writer.append("target_emits", _rows_df(ids, ri[a:b], ti[a:b], en[a:b], sn[a:b], self.t0_ns))


def _rows_df(ids: list[str], ri: list[int], ti: list[int], en: list[int], sn: list[int], t0_ns: int) -> Any:
    import numpy as np
    import pandas as pd

    return pd.DataFrame({
        "response_id": np.asarray(ids, dtype=object)[np.asarray(ri, dtype=np.int64)] if ri else [],
        "token_index": np.asarray(ti, dtype=np.int64),
        "emit_ns": np.asarray(en, dtype=np.int64) - t0_ns,  # same host: the target's perf_counter is ours
        "scheduled_ns": np.asarray(sn, dtype=np.int64) - t0_ns,
    })


def run_worker(cfg: LoadConfig, index: int, master_port: int) -> int:
    _configure_user(cfg)
    state = set_state(LoadState(cfg, index, cfg.workers))
    env = Environment(user_classes=[OpenAIStreamUser], host=cfg.target_url)
    runner = env.create_worker_runner(master_host="127.0.0.1", master_port=master_port)
    runner.register_message("harness_t0", lambda environment, msg, **kw: state.set_t0_unix_ns(int(msg.data["t0_unix_ns"])))
    key = cfg.api_key()

    def flusher() -> None:
        while True:
            gevent.sleep(1.0)
            rows = _scrub(state.drain(), key)
            runner.send_message("harness_records", {"worker": index, "rows": rows, "sent": state.sent})

    g = gevent.spawn(flusher)
    runner.greenlet.join()
    g.kill()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.loadrun", description=__doc__)
    p.add_argument("config")
    p.add_argument("--worker", type=int, default=None, help="run as worker N of the config's workers")
    p.add_argument("--master-port", type=int, default=None)
    args = p.parse_args(argv)
    from locust.log import setup_logging

    setup_logging("WARNING")
    try:
        cfg = LoadConfig.load(args.config)
        if args.worker is not None:
            return run_worker(cfg, args.worker, args.master_port)
        coord = _Coordinator(cfg, args.config)

        def _stop(*_: Any) -> None:
            coord.stop_requested = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        return coord.run()
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
