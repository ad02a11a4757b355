"""The side of a load run that owns the run directory: records in, parts out, t0, the end of the run, the summary.

Used by `python -m workloads.loadrun` (harness bench-pd) on its own Locust environment and by
`locust -f workloads/locustfile.py` (local or --master) on Locust's. Records arrive from this process's
users (LoadState) or from workers (workloads.distributed) and are appended in parts every couple of
seconds by a low-priority writer process in its own session (harness.store_process: parquet encoding
never holds this process's GIL, and a signal to the load's process group does not reach it). The run
ends when every request has a record, at t0 + span + drain timeout, or when stopped; then in-flight
requests are recorded as `cancelled`, unsent ones as `not_sent`, and missing ones as `lost`, so every
request of the workload ends as exactly one record.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections import deque
from dataclasses import asdict, replace
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import gevent
import numpy as np

from harness.errors import HarnessError
from harness.records import new_manifest
from harness.store import Run, RunWriter, check_free_space, estimate_load_run_bytes
from harness.store_process import AppendProcess
from harness.telemetry.prometheus import Scraper
from workloads.artifact import load_artifact
from workloads.clock import wall_ns
from workloads.config import LoadConfig
from harness.telemetry.proc import process_cpu_s
from workloads.distributed import MasterSide
from workloads.gpu_telemetry import GpuTelemetryConfig, GpuTelemetryProcess
from workloads.locustfile import OpenAIStreamUser
from workloads.oversaturation import LiveJudge, OversaturationRule
from workloads.profiler import ProfileClient, ProfileRecord, failure_note, where_trace
from workloads.records import mask_then_cut, missing_record
from workloads.schedule import split_indices
from workloads.summary import EngineCpu, summarise_run, summary_document

FLUSH_EVERY_S = 2.0
ARTIFACT_FILE = "workload-artifact.parquet"
WORKER_SETUP_TIMEOUT_S = 60.0
RECENT_TTFT_N = 1000  # the running TTFT p50 of the progress line is over the last this many successes


def configure_user(cfg: LoadConfig, classes: Any = None) -> None:
    """Set host and timeouts on the user classes Locust runs (`classes`: the environment's; Locust imports the
    locustfile by path, a module apart from workloads.locustfile)."""
    if not classes:
        classes = [OpenAIStreamUser]
    for user in classes:
        user.host = cfg.target_url
        user.network_timeout = cfg.request_timeout_s
        user.connection_timeout = min(30.0, cfg.request_timeout_s)


def _fetch_json(url: str, timeout_s: float = 30.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - the URL was checked to be http(s)
        return json.loads(r.read())


class Coordinator:
    """Local or master side of one run. Call open(), attach(runner), begin(), then wait() and finish()."""

    def __init__(self, cfg: LoadConfig):
        self.cfg = cfg
        self.key = cfg.api_key()
        self.artifact = load_artifact(cfg.artifact_path)
        self.items = {int(r["request_index"]): r for r in self.artifact.rows}
        self.closed_loop = self.artifact.closed_loop
        self.span_s = self.artifact.span_s
        extra = dict(cfg.manifest_extra)
        command_line = extra.pop("command_line", None)
        extra.update({"target_url": cfg.target_url, "workload": self.artifact.summary(), "workers": cfg.workers,
                      "remote_workers": cfg.remote_workers, "load_mode": "closed-loop" if self.closed_loop else "open-loop",
                      "max_concurrency": cfg.max_concurrency, "request_timeout_s": cfg.request_timeout_s,
                      "api_key_env": cfg.api_key_env, "api_key_sent": bool(self.key), "summary_options": asdict(self._summary_options()),
                      "clock": "times in ns since t0 on each process's perf_counter (CLOCK_MONOTONIC); "
                               "t0 crosses hosts on the wall clock, corrected by clock_offsets"})
        manifest = new_manifest("load", run_id=cfg.run_id, seeds={"workload": int(self.artifact.meta.get("seed", 0))},
                                engine=cfg.engine, extra=extra, command_line=command_line)
        check_free_space(cfg.results_dir, estimate_load_run_bytes(  # refuse, with the numbers, before anything is written
            len(self.items), sum(int(r["max_tokens"]) for r in self.artifact.rows), Path(cfg.artifact_path).stat().st_size))
        self.writer = RunWriter(manifest, cfg.results_dir)
        self.buffer: list[dict[str, Any]] = []
        self.seen: set[int] = set()
        self.t0_ns = 0
        self.t0_unix_ns = 0
        self.stop_requested: str | None = None  # an interruption (signal, web UI): the run is marked failed
        self.ending: str | None = None  # the planned end came with requests in flight (Locust's run time): `run_ended`
        self.client_cpu_s = self.load_wall_s = 0.0
        self.parts: Any = None
        self.parts_report: dict[str, Any] = {}
        self.errors = 0
        self.cancelled = 0
        self.recent_ttft_s: deque[float] = deque(maxlen=RECENT_TTFT_N)  # the progress line's running TTFT p50
        self.state: Any = None
        self.master: Any = None
        self.runner: Any = None
        self.scraper: Any = None
        self.gpu: Any = None  # the GPU telemetry child (workloads.gpu_telemetry), when asked for
        self.profiling: Any = None  # the greenlet calling /start_profile and /stop_profile (workloads.profiler)
        self.profile_calls: list[Any] = []
        self.profile_start_sent = False
        self.saturation: Any = None  # workloads.oversaturation.LiveJudge when the run may be cut short
        self.early_stop: Any = None  # the verdict that cut it
        if cfg.early_stop is not None:
            self.saturation = LiveJudge(cfg.early_stop.get("rate_per_s"), OversaturationRule(**(cfg.early_stop.get("rule") or {})))
        self.clock_offsets: dict[str, Any] = {}
        self._cpu0 = self._wall0 = 0.0
        self.finished = False
        self.summary: Any = None
        self._engine_cpu0: float | None = None

    # --- records in, parts out -----------------------------------------------------------------------------------
    def add(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            i = int(r["request_index"])
            if i in self.seen:
                continue  # one record per request: a late result after its cancelled record is dropped
            self.seen.add(i)
            if r.get("error_detail") and self.key:
                r["error_detail"] = mask_then_cut(r["error_detail"], self.key)
            if r["error_class"] != "ok":
                self.errors += 1
            elif r.get("ttft_s") is not None:
                self.recent_ttft_s.append(float(r["ttft_s"]))
                if self.saturation is not None and r.get("first_token_ns") is not None:
                    self.saturation.add_ttft(r["first_token_ns"] / 1e9, float(r["ttft_from_intended_s"]))
            if r["error_class"] == "cancelled":
                self.cancelled += 1
            self.buffer.append(r)

    def append(self, table: str, rows: Any) -> None:
        if self.parts is not None:
            self.parts.append(table, rows)
        else:
            self.writer.append(table, rows)

    def flush(self) -> None:
        if self.buffer:
            rows, self.buffer = self.buffer, []
            self.append("requests", rows)

    @property
    def sent(self) -> int:
        return self.state.sent if self.state is not None else (self.master.sent if self.master is not None else 0)

    def progress(self) -> None:
        if not self.cfg.progress:
            return
        ttft = sorted(self.recent_ttft_s)  # at most RECENT_TTFT_N values: ~0.1 ms once a second
        print(json.dumps({"progress": {"t_s": round((perf_counter_ns() - self.t0_ns) / 1e9, 2), "span_s": self.span_s,
                                       "sent": self.sent, "done": len(self.seen), "expected": len(self.items), "errors": self.errors,
                                       "ttft_p50_s": ttft[len(ttft) // 2] if ttft else None, "ttft_n": len(ttft)}}),
              flush=True)

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def open(self) -> None:
        self.writer.append("workload", self.artifact.table_rows())
        # the artifact itself (prompts included), so `--workload RUN/workload-artifact.parquet` replays this run exactly
        self.writer.copy_file(self.cfg.artifact_path, ARTIFACT_FILE)
        if self.cfg.plan_path:
            self.writer.write_json("plan.json", json.loads(Path(self.cfg.plan_path).read_text()))
        for name, path in self.cfg.sidecars.items():  # e.g. prediction.json: the twin's prediction, made before the run
            self.writer.write_json(name, json.loads(Path(path).read_text()))
        self.parts = AppendProcess(self.writer)

    def attach(self, runner: Any, state: Any = None) -> None:
        """`state`: this process's LoadState (local runner); None for a master, whose workers get theirs by message."""
        self.runner = runner
        self.state = state
        if state is None:
            self.master = MasterSide(runner, self.add)

    def begin(self) -> None:
        """Set up the workers (master), choose t0 and hand it out, start scraping. Call before the users spawn."""
        cfg = self.cfg
        if self.master is not None:
            self.clock_offsets = self.master.setup_workers(cfg.to_dict(), Path(cfg.artifact_path).read_bytes(), WORKER_SETUP_TIMEOUT_S)
        self.t0_unix_ns = wall_ns() + int(cfg.t0_lead_s * 1e9)
        self.t0_ns = perf_counter_ns() + (self.t0_unix_ns - wall_ns())
        self.writer.update_manifest(extra={**self.writer.manifest.extra, "t0_unix_ns": self.t0_unix_ns,
                                           "clock_offsets": self.clock_offsets})
        if self.state is not None:
            self.state.set_t0_ns(self.t0_ns)
        else:
            self.master.send_t0(self.t0_unix_ns)
        self.scraper = Scraper(cfg.scrape, lambda rows: self.append("server_metrics", rows), cfg.scrape_interval_s,
                               t0_fn=lambda: self.t0_ns / 1e9)
        self.scraper.start()
        self._start_gpu_telemetry()
        if cfg.profile:
            self.profiling = gevent.spawn(self._profile_window)
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        if cfg.engine_process is not None:  # the launched engine's CPU over the run (harness.telemetry.proc)
            self._engine_cpu0 = process_cpu_s(cfg.engine_process["pid"])

    def done(self) -> bool:
        """Every request has a record; or a closed loop's send window is over and every request sent has one (the
        pool's unused rest is recorded as not_sent by finish)."""
        if len(self.seen) >= len(self.items):
            return True
        return (self.closed_loop and self.t0_ns > 0 and perf_counter_ns() >= self.t0_ns + int(self.span_s * 1e9)
                and self.sent <= len(self.seen))

    def wait(self) -> None:
        """Collect records until every request has one, the deadline passes, or a stop is requested."""
        end_ns = self.t0_ns + int((self.span_s + self.cfg.drain_timeout_s) * 1e9)
        last_flush = last_progress = time.monotonic()
        while True:
            if self.state is not None:
                self.add(self.state.drain())
            now = time.monotonic()
            if now - last_flush >= FLUSH_EVERY_S:
                self.flush()
                last_flush = now
            if now - last_progress >= 1.0:
                self.progress()
                last_progress = now
                if self.saturation is not None and self._oversaturated():
                    break
            if self.done() or perf_counter_ns() >= end_ns or self.stop_requested:
                break
            gevent.sleep(0.1)
        self.progress()

    def _oversaturated(self) -> bool:
        """Apply the over-saturation rule now; when it fires, keep its verdict (manifest `early_stop`) and end the run."""
        now_s = (perf_counter_ns() - self.t0_ns) / 1e9
        v = self.saturation.tick(now_s, max(0, self.sent - len(self.seen)))
        if v is None:
            return False
        self.early_stop = v
        self.writer.update_manifest(extra={**self.writer.manifest.extra, "early_stop": {**v.to_dict(), "rule": self.saturation.rule.to_dict(),
                                                                                         "rate_per_s": self.saturation.rate_per_s}},
                                    notes=[*self.writer.manifest.notes, f"stopped early at {v.t_s:.1f} s: over-saturated: {v.reason}"])
        return True

    def cancel_in_flight(self, reason: str, error_class: str = "cancelled") -> list[int]:
        """Record every request in flight as cancelled (here, or on every worker); returns workers that did not answer.
        `error_class` "run_ended": they were in flight when the run's planned time ended (not failures)."""
        if self.state is not None:
            self.state.cancel_in_flight(f"{error_class}: {reason}", error_class)
            self.add(self.state.drain())
            return []
        if self.master is not None and self.master.ready:
            return self.master.stop_workers(reason, error_class=error_class)
        return []

    def finish(self) -> Any:
        """Write the records still missing, the summary and the manifest's end state; returns the LoadSummary."""
        if self.finished:
            return self.summary
        self.finished = True
        self.client_cpu_s, self.load_wall_s = time.process_time() - self._cpu0, time.perf_counter() - self._wall0
        if not self.done():
            why = self.stop_requested or ("over-saturated (the step was cut short)" if self.early_stop else None) \
                or self.ending or "the run's deadline passed"
            silent = self.cancel_in_flight(why, error_class="run_ended" if self.ending and not (self.stop_requested or self.early_stop)
                                           else "cancelled")
            if silent:
                self.writer.update_manifest(notes=[*self.writer.manifest.notes,
                                                   f"workers {silent} sent no final records; their requests in flight are 'lost'"])
        if self.scraper is not None:
            self.scraper.stop()
        self._close_gpu_telemetry()
        self._end_profile()
        if self.state is not None:
            self.add(self.state.drain())
            never_started = self.state.never_started()
        else:
            gevent.sleep(0.5)  # let the workers' last messages land
            never_started = self._owned_by_answering_workers()
        rows = []
        for i in [i for i in self.items if i not in self.seen]:
            cls = "not_sent" if i in never_started else "lost"
            detail = ("its send time never came before the run ended" if cls == "not_sent"
                      else "no result before the run ended (still in flight, or its worker died)")
            rows.append(missing_record(self.items[i], cls, worker_index=-1, detail=detail))
        self.add(rows)
        self.flush()
        self._close_parts()
        if self.writer.rescue is not None:  # the disk filled: the run failed; say what was kept where
            raise self.writer.disk_full_error()
        self._fetch_emit_log()

        opts = self._summary_options()
        # from the stored table, not the records in memory: a killed or imported run summarises the same way
        if self.cfg.engine_process is not None:
            c1 = process_cpu_s(self.cfg.engine_process["pid"])
            used = None if c1 is None or self._engine_cpu0 is None else c1 - self._engine_cpu0
            self.writer.update_manifest(extra={**self.writer.manifest.extra, "engine_cpu": EngineCpu(
                self.cfg.engine_process["pid"], self.cfg.engine_process["threads"], used).to_dict()})
        # a run cut short as over-saturated is summarised over what it measured: its schedule up to the cut
        span_s = min(self.span_s, self.early_stop.t_s) if self.early_stop is not None else self.span_s
        self.summary = summarise_run(Run(self.writer.path), options=opts, span_s=span_s)
        writer_cpu_s = float(self.parts_report.get("writer_cpu_s", 0.0))
        workers_cpu = ({str(k): v for k, v in sorted(self.master.cpu_by_worker.items())} if self.master is not None else {})
        self.writer.write_json("summary.json", summary_document(
            self.summary, span_s=span_s, options=opts,
            load_mode="closed-loop" if self.closed_loop else "open-loop", stopped=self.stop_requested, cancelled=self.cancelled,
            # a simulated target (the embedded one, or one that said so: X-Harness-Simulated) is said here too
            simulated=bool(self.cfg.engine.get("simulated")),
            # client cost per token: CPU of this process (all users when workers == 0) while the load ran,
            # plus the part writer process's CPU for encoding and writing the records (its start-up excluded)
            client_process={"cpu_s": self.client_cpu_s + writer_cpu_s, "load_process_cpu_s": self.client_cpu_s,
                            "part_writer_cpu_s": writer_cpu_s, "wall_s": self.load_wall_s, "workers": self.cfg.workers,
                            # with workers, each worker process's CPU from t0 to its last report (their users' cost)
                            "worker_cpu_s": workers_cpu,
                            "all_processes_cpu_s": self.client_cpu_s + writer_cpu_s + sum(workers_cpu.values())},
        ))
        return self.summary

    def _summary_options(self) -> Any:
        o = self.cfg.summary
        return replace(o, closed_loop=True) if self.closed_loop and hasattr(o, "closed_loop") else o

    def _owned_by_answering_workers(self) -> set[int]:
        """Requests of workers that sent their final records: having cancelled what was in flight, any request of
        theirs without a record was never started. A silent worker's requests stay 'lost'."""
        if self.master is None or not self.master.ready:
            return set()
        sessions = self.artifact.sessions()
        n = len(self.master.ready)
        out: set[int] = set()
        for w in self.master.final:
            for k in split_indices(len(sessions), w, n):
                out.update(int(r["request_index"]) for r in sessions[int(k)])
        return out

    def close(self, exc: BaseException | None = None) -> None:
        """Close the run directory: complete, or failed with the reason (an interrupted run is 'failed: interrupted')."""
        try:
            self._close_parts()
            self._close_gpu_telemetry()
            self._end_profile()
        except Exception:  # noqa: BLE001 - keep what was measured; the error that ended the run is the one to report
            pass
        if exc is None and self.stop_requested:
            exc = KeyboardInterrupt(f"interrupted ({self.stop_requested}); {self.cancelled} requests in flight recorded as cancelled")
        self.writer.__exit__(type(exc) if exc else None, exc, None)

    def _profile_client(self) -> Any:
        return ProfileClient(self.cfg.target_url, self.t0_ns, api_key=self.key, output_dir=self.cfg.profile.get("output_dir"))

    def _profile_window(self) -> None:
        """Call /start_profile at the window's start and /stop_profile at its end (seconds since t0)."""
        start_s, end_s = self.cfg.profile["window_s"]
        client = self._profile_client()
        gevent.sleep(max(0.0, self.t0_ns / 1e9 + start_s - perf_counter_ns() / 1e9))
        self.profile_start_sent = True  # from here the engine may be profiling, even if the run ends before the answer
        self.profile_calls.append(client.call("/start_profile"))
        gevent.sleep(max(0.0, self.t0_ns / 1e9 + end_s - perf_counter_ns() / 1e9))
        self.profile_calls.append(client.call("/stop_profile"))

    def _end_profile(self) -> None:
        """Record the profile window (profile.json); a run that ended inside it stops the profiler now."""
        if self.profiling is None:
            return
        g, self.profiling = self.profiling, None

        note = ""
        if not g.dead:
            g.kill()
            if self.profile_start_sent:
                self.profile_calls.append(self._profile_client().call("/stop_profile"))
                note = "the run ended inside the profile window; the profiler was stopped then"
            else:
                note = "the run ended before the profile window began; the engine was not profiled"
        p = self.cfg.profile
        rec = ProfileRecord(tuple(p["window_s"]), tuple(p.get("window_in_measurement_s") or p["window_s"]), list(self.profile_calls),
                            where_trace(self.profile_calls, p.get("output_dir")) if self.profile_calls else "",
                            "; ".join(x for x in (note, failure_note(self.profile_calls)) if x))
        self.writer.write_json("profile.json", rec.to_dict())
        if rec.note:
            self.writer.update_manifest(notes=[*self.writer.manifest.notes, f"profile: {rec.note}"])

    def _start_gpu_telemetry(self) -> None:
        cfg = self.cfg
        if not (cfg.gpu_local or cfg.gpu_metrics):
            return

        self.gpu = GpuTelemetryProcess(self.writer.path, self.writer.manifest.run_id, self.t0_ns,
                                       GpuTelemetryConfig(local=cfg.gpu_local, endpoints=list(cfg.gpu_metrics),
                                                          interval_s=cfg.gpu_interval_s))

    def _close_gpu_telemetry(self) -> None:
        """Stop the GPU sampler; its report (sources, samples, failed reads per endpoint) goes to gpu_telemetry.json,
        and an endpoint that never answered to the manifest's notes."""
        if self.gpu is None:
            return
        gpu, self.gpu = self.gpu, None
        report = gpu.close()
        self.writer.write_json("gpu_telemetry.json", report)
        notes = [f"GPU telemetry: {report['error']}"] if report.get("error") else []
        if str(report.get("nvml", "")).startswith("NVML unavailable"):
            notes.append(f"GPU telemetry: local sampling was asked for, but {report['nvml']}")
        for ep, e in (report.get("errors") or {}).items():
            notes.append(f"GPU telemetry from {ep}: {e['count']} failed reads (first: {e['first']})")
        if notes:
            self.writer.update_manifest(notes=[*self.writer.manifest.notes, *notes])

    def _close_parts(self) -> None:
        if self.parts is None:
            return
        parts, self.parts = self.parts, None
        self.parts_report = parts.close()
        if self.parts_report.get("note"):
            self.writer.update_manifest(notes=[*self.writer.manifest.notes, self.parts_report["note"]])

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

    def kept_message(self) -> str:
        """What an interrupted run kept, and how to look at it."""
        return (f"interrupted: {len(self.seen)} of {len(self.items)} requests recorded ({self.cancelled} in flight recorded as "
                f"cancelled) in {self.writer.path}; render it with `harness report {self.writer.path}`")


def _rows_df(ids: list[str], ri: list[int], ti: list[int], en: list[int], sn: list[int], t0_ns: int) -> Any:
    # lazy: pandas adds ~0.5 s to the load process's start-up; only the end of a run writes this table
    import pandas as pd

    return pd.DataFrame({
        "response_id": np.asarray(ids, dtype=object)[np.asarray(ri, dtype=np.int64)] if ri else [],
        "token_index": np.asarray(ti, dtype=np.int64),
        "emit_ns": np.asarray(en, dtype=np.int64) - t0_ns,  # same host: the target's perf_counter is ours
        "scheduled_ns": np.asarray(sn, dtype=np.int64) - t0_ns,
    })


def print_err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
