"""Plain `locust -f workloads/locustfile.py`: the harness's options on Locust's parser, and this process's side of the run.

Local (`--headless` or the web UI) and `--master` processes build the workload from the options (or read
`--workload FILE`), own the run directory (workloads.coordinator) and end the test when every request
has a record; `--worker` processes get their share, the config and t0 from the master
(workloads.distributed), so a worker on another host needs only the code and the API key variable.
Open loop with `--request-rate R` (requests/s for `--duration-s`, default the run time), otherwise
closed loop: each Locust user sends its next request when the previous one ended (`-u` users), from
a pool of `--num-requests` requests, until the pool or the run time is used up.
Options can also come from a config file (`locust --config locust.conf`, keys without the dashes).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

DEFAULT_INPUT_TOKENS = 128
DEFAULT_OUTPUT_TOKENS = 64
DEFAULT_DURATION_S = 60.0


def add_locust_arguments(parser: Any) -> None:
    from workloads.workload_spec import add_workload_arguments

    g = parser.add_argument_group("llm-dist-harness", "workload and run options (docs/loadgen.md)")
    add_workload_arguments(g)
    a = g.add_argument
    a("--request-rate", type=float, default=None, help="open loop: requests per second on --schedule (default: closed loop, -u users)")
    a("--schedule", default="poisson", choices=["constant", "poisson", "gamma"], help="arrival process for --request-rate")
    a("--duration-s", type=float, default=None, help="schedule length (open loop) or send window (closed loop); default the run time, else 60")
    a("--num-requests", type=int, default=1000, help="closed loop: the pool of requests the users draw from")
    a("--seed", type=int, default=0, help="workload seed")
    a("--api", default="chat", choices=["chat", "completions"])
    a("--model-name", default="default", help="model name to send")
    a("--api-key-env", default=None, help="NAME of the environment variable holding the API key (set it on every worker host)")
    a("--request-timeout-s", type=float, default=120.0)
    a("--workload", default=None, help="replay this workload artifact (.parquet) instead of building one")
    a("--results", default="results", help="results directory for the run's records ('' to keep Locust's statistics only)")
    a("--warmup-s", type=float, default=0.0, help="summary window starts here (intended send time)")
    a("--slo-ttft-s", type=float, default=None)
    a("--slo-tpot-s", type=float, default=None)
    a("--ignore-eos", action="store_true", help="send ignore_eos: true (vLLM, SGLang, the embedded target) so outputs reach max_tokens")


def _build_artifact(opts: Any, duration_s: float, workdir: Path) -> Path:
    from workloads.artifact import load_artifact, save_artifact
    from workloads.schedule import closed_loop, make_schedule
    from workloads.workload_spec import build_workload, spec_from_args

    if opts.workload:
        load_artifact(opts.workload)
        return Path(opts.workload)
    spec = spec_from_args(opts)
    if opts.request_rate is not None:
        if not opts.request_rate > 0:
            raise HarnessError(f"--request-rate must be > 0 requests per second, got {opts.request_rate!r}.")
        kw = {"cv": 2.0} if opts.schedule == "gamma" else {}
        sched = make_schedule(opts.schedule, rate_per_s=opts.request_rate, duration_s=duration_s, seed=opts.seed, **kw)
    else:
        sched = closed_loop(int(opts.num_requests), duration_s, max(1, int(opts.num_users or 1)), opts.seed)
    art = build_workload(spec, sched, name="locust", seed=opts.seed, api=opts.api, default_input_tokens=DEFAULT_INPUT_TOKENS,
                         default_output_tokens=DEFAULT_OUTPUT_TOKENS)
    return save_artifact(art, workdir)


class PlainRun:
    """The local or master side of a plain Locust run."""

    def __init__(self, environment: Any):
        from harness.records import new_run_id
        from workloads.config import LoadConfig, SummaryOptions, check_http_url
        from workloads.coordinator import Coordinator, configure_user
        from workloads.loadstate import LoadState, set_state

        self.env = environment
        opts = environment.parsed_options
        host = environment.host or getattr(opts, "host", None)
        if not host:
            raise HarnessError("give the server with --host http://HOST:PORT (an OpenAI-compatible endpoint).")
        host = check_http_url(host, "--host")
        duration_s = opts.duration_s or (float(opts.run_time) if getattr(opts, "run_time", None) else DEFAULT_DURATION_S)
        self.workdir = Path(tempfile.mkdtemp(prefix="harness-locust-"))
        art_path = _build_artifact(opts, duration_s, self.workdir)
        self.results = opts.results
        cfg = LoadConfig(
            target_url=host, artifact_path=str(art_path), run_id=new_run_id("locust"), results_dir=opts.results or str(self.workdir / "results"),
            model=opts.model_name, api_key_env=opts.api_key_env or None, workers=0,
            max_concurrency=max(1, int(opts.num_users or 1)), request_timeout_s=opts.request_timeout_s,
            drain_timeout_s=opts.request_timeout_s + 10.0, extra_body={"ignore_eos": True} if opts.ignore_eos else {},
            summary=SummaryOptions(warmup_s=opts.warmup_s, slo_ttft_s=opts.slo_ttft_s, slo_tpot_s=opts.slo_tpot_s),
            manifest_extra={"command_line": list(sys.argv), "bench": "locust", "target": host,
                            "options": {k: v for k, v in vars(opts).items() if isinstance(v, (str, int, float, bool, type(None)))}},
            engine={"name": "external", "simulated": False, "url": host}, progress=False,
        )
        configure_user(cfg)
        self.coord = Coordinator(cfg)
        self.coord.open()
        runner = environment.runner
        from locust.runners import MasterRunner

        if isinstance(runner, MasterRunner):
            self.coord.attach(runner)
        else:
            self.coord.attach(runner, set_state(LoadState(cfg, 0, 1)))
        self.watcher: Any = None
        self.finisher: Any = None
        _sigterm_in_a_greenlet()
        ev = environment.events
        ev.test_start.add_listener(self._on_start)
        ev.test_stopping.add_listener(self._on_stopping)
        ev.quitting.add_listener(self._on_quitting)

    def _on_start(self, **_: Any) -> None:
        import gevent

        if self.coord.t0_ns:
            return  # one run per process: a second start in the web UI is not a new run
        try:
            self.coord.begin()
        except HarnessError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            self.env.process_exit_code = 1
            gevent.spawn(self.env.runner.quit)
            return
        self.watcher = gevent.spawn(self._watch)

    def _watch(self) -> None:
        import gevent

        self.coord.wait()
        if self.coord.done() and self.finisher is None:
            self.finisher = gevent.getcurrent()
            self._end(None)
            if self.env.parsed_options.headless:
                self.env.runner.quit()
            else:
                self.env.runner.stop()

    def _on_stopping(self, **_: Any) -> None:
        """Locust stops the test (its run time, the web UI, a signal) before every request has a record: finish in a
        greenlet of our own, since Locust kills its own greenlets while it stops and does not expect a handler to wait."""
        if self.coord.t0_ns and not self.coord.finished and self.finisher is None:
            import gevent

            self.coord.stop_requested = "Locust stopped the test (its run time, the web UI, or a signal)"
            self.finisher = gevent.spawn(self._end, None)

    def _on_quitting(self, **_: Any) -> None:
        """Runs in Locust's shutdown, just before it exits: wait here until the run is written."""
        self._on_stopping()
        if self.finisher is not None:
            self.finisher.join(timeout=180)
        elif not self.coord.t0_ns and not self.coord.finished:
            self.coord.finished = True
            self.coord.close(None)
        shutil.rmtree(self.workdir, ignore_errors=True)  # the artifact was copied into the run; with --results '' so is the run

    def _end(self, exc: BaseException | None) -> None:
        if self.coord.finished:
            return
        try:
            s = self.coord.finish()
        finally:
            self.coord.close(exc)
        path = self.coord.writer.path
        head = (f"harness: {len(self.coord.seen)} requests recorded in {path}; "
                f"{'VALID' if s.valid else 'INVALID: ' + '; '.join(s.invalid_reasons)}")
        print(head, file=sys.stderr, flush=True)
        if self.coord.stop_requested:
            print(self.coord.kept_message(), file=sys.stderr, flush=True)
        if not s.valid:
            self.env.process_exit_code = 1


def _sigterm_in_a_greenlet() -> None:
    """Locust runs its SIGTERM handler (shutdown: the quitting event, then exit) in gevent's hub, where nothing may
    block; writing the cancelled records, waiting for the part writer and for the workers' last records all do.
    Locust registers that handler after the init event, through gevent.signal_handler: wrap the one registration
    for SIGTERM so its handler runs in a greenlet of its own (Ctrl-C already ends up in the main greenlet)."""
    import signal

    import gevent

    orig = gevent.signal_handler

    def signal_handler(signum: int, handler: Any, *args: Any, **kw: Any) -> Any:
        if signum == signal.SIGTERM:
            gevent.signal_handler = orig
            return orig(signum, lambda *a, **k: gevent.spawn(handler, *a, **k), *args, **kw)
        return orig(signum, handler, *args, **kw)

    gevent.signal_handler = signal_handler


_ATTACHED: Any = None


def attach(environment: Any) -> Any:
    """Called from the locustfile's init hook. Does nothing when the harness's own load process set the state."""
    global _ATTACHED
    from locust.runners import WorkerRunner

    from workloads import loadstate
    from workloads.coordinator import configure_user

    if loadstate._STATE is not None or environment.parsed_options is None:
        return None
    if isinstance(environment.runner, WorkerRunner):
        from workloads.distributed import WorkerSide

        _sigterm_in_a_greenlet()  # its final records (the cancelled ones) are sent from Locust's shutdown
        _ATTACHED = WorkerSide(environment, configure_user)
        return _ATTACHED
    try:
        _ATTACHED = PlainRun(environment)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    return _ATTACHED
