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
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.store import Run
from workloads.artifact import load_artifact
from workloads.extras_options import (ExtrasOptions, add_gpu_arguments, add_profile_arguments, check_extras, load_config_fields,
                                      parse_gpu_metrics_url)
from workloads.profiler import parse_profile_window
from workloads.run_extras import extra_lines, run_extras

DEFAULT_INPUT_TOKENS = 128
DEFAULT_OUTPUT_TOKENS = 64
DEFAULT_DURATION_S = 60.0


class _WebUiGroup:
    """An argument group whose options Locust's web UI shows (LocustArgumentParser reads `include_in_web_ui` from each
    action; an argparse group's own add_argument does not set it)."""

    def __init__(self, group: Any):
        self.group = group

    def add_argument(self, *args: Any, **kw: Any) -> Any:
        action = self.group.add_argument(*args, **kw)
        action.include_in_web_ui, action.is_secret, action.is_required, action.is_multiple = True, False, False, False
        return action


def add_locust_arguments(parser: Any) -> None:
    from workloads.workload_spec import add_workload_arguments

    g = _WebUiGroup(parser.add_argument_group("llm-dist-harness", "workload and run options (docs/loadgen.md)"))
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
    a("--warmup-s", default="auto", help="the summary window's start: 'auto' (where the requests in flight settled, measured) "
                                         "or seconds of intended send time")
    a("--slo-ttft-s", type=float, default=None)
    a("--slo-tpot-s", type=float, default=None)
    a("--ignore-eos", action="store_true", help="send ignore_eos: true (vLLM, SGLang, the embedded target) so outputs reach max_tokens")
    add_extras_arguments(parser.add_argument_group("llm-dist-harness: GPU telemetry, engine profile, early stop",
                                                   "beside the requests (docs/loadgen.md); set on the command line or in the "
                                                   "config file"))


def add_extras_arguments(g: Any) -> None:
    """GPU telemetry, the engine profile window and the over-saturation cut, as bench-pd has them
    (workloads.extras_options). Not in the web UI's form: a repeatable option does not fit it."""
    a = g.add_argument
    add_gpu_arguments(a, nvml_auto="when --host is on this host and NVML sees a GPU")
    add_profile_arguments(a)
    a("--early-stop", action="store_true", help="open loop (--request-rate): cut the run short when it is over-saturated "
      "(workloads/oversaturation.py); requests not yet sent are recorded as not_sent")


_REGISTERED = False


def register(events: Any) -> None:
    """Add the harness's options and its run to Locust, once per process: Locust imports the locustfile by path and
    the harness imports it as workloads.locustfile, and the web UI rebuilds its parser on every page load, so a
    listener added per import would add every option twice (argparse: conflicting option string)."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    events.init_command_line_parser.add_listener(lambda parser, **_kw: add_locust_arguments(parser))
    events.init.add_listener(lambda environment, **_kw: attach(environment))


def _opt(opts: Any, name: str, kind: type, default: Any = None) -> Any:
    """An option as the web UI may hand it back (a string where its default was None; '' for empty)."""
    v = getattr(opts, name, default)
    if v is None or v == "":
        return default
    try:
        return kind(v)
    except (TypeError, ValueError):
        raise HarnessError(f"--{name.replace('_', '-')} {v!r}: expected {kind.__name__}.") from None


def _warmup(opts: Any) -> tuple[float, bool]:
    """(warmup_s, auto) from --warmup-s ('auto' or seconds)."""
    v = getattr(opts, "warmup_s", "auto")
    if v is None or str(v).strip() in ("", "auto"):
        return 0.0, True
    w = _opt(opts, "warmup_s", float, 0.0)
    if not w >= 0:
        raise HarnessError(f"--warmup-s must be 'auto' or seconds >= 0, got {v!r}.")
    return w, False


def _build_artifact(opts: Any, duration_s: float, workdir: Path) -> Path:
    from workloads.artifact import load_artifact, save_artifact
    from workloads.schedule import closed_loop, make_schedule
    from workloads.workload_spec import build_workload, spec_from_args

    if opts.workload:
        load_artifact(opts.workload)
        return Path(opts.workload)
    spec = spec_from_args(opts)
    rate = _opt(opts, "request_rate", float)
    seed = _opt(opts, "seed", int, 0)
    if rate is not None:
        if not rate > 0:
            raise HarnessError(f"--request-rate must be > 0 requests per second, got {rate!r}.")
        kw = {"cv": 2.0} if opts.schedule == "gamma" else {}
        sched = make_schedule(opts.schedule, rate_per_s=rate, duration_s=duration_s, seed=seed, **kw)
    else:
        sched = closed_loop(_opt(opts, "num_requests", int, 1000), duration_s, max(1, int(opts.num_users or 1)), seed)
    art = build_workload(spec, sched, name="locust", seed=seed, api=opts.api, default_input_tokens=DEFAULT_INPUT_TOKENS,
                         default_output_tokens=DEFAULT_OUTPUT_TOKENS)
    return save_artifact(art, workdir)


def extras_options(opts: Any, warmup_s: float) -> ExtrasOptions:
    """The GPU telemetry, profile window and early-stop options as given (checked; a closed loop has no rate to judge)."""
    x = ExtrasOptions(gpu_metrics=[parse_gpu_metrics_url(u) for u in getattr(opts, "gpu_metrics_url", None) or []],
                      gpu_nvml=getattr(opts, "gpu_nvml", None) or "auto",
                      gpu_interval_s=_opt(opts, "gpu_metrics_interval_s", float, 1.0),
                      profile_window=parse_profile_window(getattr(opts, "profile_window", None)),
                      profile_dir=getattr(opts, "profile_dir", None) or None, early_stop=bool(getattr(opts, "early_stop", False)),
                      warmup_s=warmup_s)
    check_extras(x, closed_loop=_opt(opts, "request_rate", float) is None,
                 closed_loop_flag="a run without --request-rate (closed loop, -u users)")
    return x


def _load_mode_label(opts: Any) -> str:
    """What kind of run this is, as the report and the console say it."""
    users, spawn = int(opts.num_users or 1), getattr(opts, "spawn_rate", None)
    head = "open-loop" if _opt(opts, "request_rate", float) is not None else "closed-loop"
    return f"{head} (Locust: {users} users, spawn rate {float(spawn or users):g}/s)"


class PlainRun:
    """The local or master side of a plain Locust run. Headless (and --master) runs are set up at Locust's init; a
    web-UI run when the test starts, from the options the UI user set."""

    def __init__(self, environment: Any):
        from workloads.config import check_http_url

        self.env = environment
        opts = environment.parsed_options
        host = environment.host or getattr(opts, "host", None)
        if not host and opts.headless:
            raise HarnessError("give the server with --host http://HOST:PORT (an OpenAI-compatible endpoint).")
        self.host = check_http_url(host, "--host") if host else None
        self.coord: Any = None
        self.workdir: Path | None = None
        self.watcher: Any = None
        self.finisher: Any = None
        self.started_s: float | None = None
        _sigterm_in_a_greenlet()
        ev = environment.events
        ev.test_start.add_listener(self._on_start)
        ev.test_stopping.add_listener(self._on_stopping)
        ev.quitting.add_listener(self._on_quitting)
        if opts.headless or getattr(opts, "master", False):
            self._prepare()

    def _prepare(self) -> None:
        """Build the workload from the options and open the run directory."""
        from harness.records import new_run_id
        from workloads.config import LoadConfig, SummaryOptions, check_http_url
        from workloads.coordinator import Coordinator, configure_user
        from workloads.loadstate import LoadState, set_state
        from workloads.preflight import simulated_target

        env, opts = self.env, self.env.parsed_options
        host = env.host or getattr(opts, "host", None) or self.host
        if not host:
            raise HarnessError("give the server with --host http://HOST:PORT (an OpenAI-compatible endpoint).")
        host = check_http_url(host, "--host")
        run_time = float(opts.run_time) if getattr(opts, "run_time", None) else None
        duration_s = _opt(opts, "duration_s", float) or run_time or DEFAULT_DURATION_S
        self.workdir = Path(tempfile.mkdtemp(prefix="harness-locust-"))
        art_path = _build_artifact(opts, duration_s, self.workdir)
        warmup_s, auto = _warmup(opts)
        timeout_s = _opt(opts, "request_timeout_s", float, 120.0)
        # GPU telemetry, profile window, early stop: checked before anything is sent (a window outside the run is refused)
        extras = load_config_fields(extras_options(opts, warmup_s), load_artifact(art_path), target_url=host)
        cfg = LoadConfig(
            target_url=host, artifact_path=str(art_path), run_id=new_run_id("locust"),
            results_dir=opts.results or str(self.workdir / "results"), model=opts.model_name, api_key_env=opts.api_key_env or None,
            workers=0, max_concurrency=max(1, int(opts.num_users or 1)), request_timeout_s=timeout_s,
            drain_timeout_s=timeout_s + 10.0, extra_body={"ignore_eos": True} if opts.ignore_eos else {},
            summary=SummaryOptions(warmup_s=warmup_s, warmup_auto=auto, slo_ttft_s=_opt(opts, "slo_ttft_s", float),
                                   slo_tpot_s=_opt(opts, "slo_tpot_s", float)),
            manifest_extra={"command_line": list(sys.argv), "bench": "locust", "target": host,
                            "load_mode_label": _load_mode_label(opts), "locust_users": int(opts.num_users or 1),
                            "locust_spawn_rate": float(getattr(opts, "spawn_rate", None) or opts.num_users or 1),
                            "locust_run_time_s": run_time,
                            "options": {k: v for k, v in vars(opts).items() if isinstance(v, (str, int, float, bool, type(None)))}},
            engine={"name": "external", "simulated": False, "url": host}, progress=False, **extras,
        )
        sim = simulated_target(host, api_key=cfg.api_key(), timeout_s=10.0)
        if sim is not None:  # a target that says it is simulated is labelled so in every output
            cfg = replace(cfg, engine={"name": "external", "simulated": True, "simulated_by": "header", "url": host, "info": sim})
        configure_user(cfg, env.user_classes)
        self.coord = Coordinator(cfg)
        self.coord.open()
        from locust.runners import MasterRunner

        if isinstance(env.runner, MasterRunner):
            self.coord.attach(env.runner)
        else:
            self.coord.attach(env.runner, set_state(LoadState(cfg, 0, 1)))

    def _on_start(self, **_: Any) -> None:
        import time

        import gevent

        if self.coord is not None and self.coord.t0_ns:
            print("harness: one run per Locust process; restart locust for another run (this start sends nothing)",
                  file=sys.stderr, flush=True)
            return
        try:
            if self.coord is None:
                self._prepare()
            self.coord.begin()
        except HarnessError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            self.env.process_exit_code = 1
            gevent.spawn(self.env.runner.quit)
            return
        self.started_s = time.monotonic()
        self.watcher = gevent.spawn(self._watch)

    def _watch(self) -> None:
        import gevent

        self.coord.wait()
        if (self.coord.done() or self.coord.early_stop is not None) and self.finisher is None:
            self.finisher = gevent.getcurrent()
            self._end(None)
            if self.env.parsed_options.headless:
                self.env.runner.quit()
            else:
                self.env.runner.stop()

    def _run_time_over(self) -> bool:
        """Locust's --run-time (or the send window) has passed: a stop now is the planned end, not an interruption."""
        import time

        opts = self.env.parsed_options
        limit = float(opts.run_time) if getattr(opts, "run_time", None) else None
        return (self.started_s is not None and limit is not None and time.monotonic() - self.started_s >= limit - 0.5)

    def _on_stopping(self, **_: Any) -> None:
        """Locust stops the test (its run time, the web UI, a signal) before every request has a record: finish in a
        greenlet of our own, since Locust kills its own greenlets while it stops and does not expect a handler to wait.
        At the run time's end that is the planned end (requests then in flight are recorded as `run_ended`); any other
        stop is an interruption (they are `cancelled` and the run is marked failed)."""
        if self.coord is not None and self.coord.t0_ns and not self.coord.finished and self.finisher is None:
            import gevent

            if self._run_time_over():
                self.coord.ending = f"Locust's run time ({self.env.parsed_options.run_time} s) ended"
            else:
                self.coord.stop_requested = "Locust stopped the test (the web UI, or a signal) before its run time"
            self.finisher = gevent.spawn(self._end, None)

    def _on_quitting(self, **_: Any) -> None:
        """Runs in Locust's shutdown, just before it exits: wait here until the run is written."""
        self._on_stopping()
        if self.finisher is not None:
            self.finisher.join(timeout=180)
        elif self.coord is not None and not self.coord.t0_ns and not self.coord.finished:
            # set up but never started: nothing was measured, so the run is not a complete one
            self.coord.finished = True
            self.coord.close(RuntimeError("the test was never started; nothing was sent or measured"))
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)  # the artifact was copied into the run; with --results '' so is the run

    def _end(self, exc: BaseException | None) -> None:
        if self.coord.finished:
            return
        try:
            s = self.coord.finish()
        finally:
            self.coord.close(exc if exc is not None or s is None or s.requests_sent else
                             RuntimeError("stopped before any request was sent; nothing was measured"))
        for line in console_lines(s, self.coord.writer.path, self.coord.writer.manifest.extra.get("load_mode_label", "")):
            print(line, file=sys.stderr, flush=True)
        for line in extras_lines(self.coord.writer.path):
            print(f"harness: {line}", file=sys.stderr, flush=True)
        if self.coord.stop_requested:
            print(self.coord.kept_message(), file=sys.stderr, flush=True)
        if not s.valid:
            self.env.process_exit_code = 1


def console_lines(s: Any, path: Any, mode: str) -> list[str]:
    """The run's end as plain Locust prints it: what was sent, where it is stored, whether it is valid, the figures."""
    from workloads.headline import headline_lines

    unused = s.errors_by_class.get("not_sent", 0)
    failed = sum(v for k, v in s.errors_by_class.items() if k not in ("ok", "not_sent", "run_ended"))
    cut = s.errors_by_class.get("run_ended", 0)
    sent = s.requests_sent if s.requests_sent is not None else s.requests_total
    head = (f"harness: {sent} requests sent ({sent - failed - cut} ok, {failed} failed"
            + (f", {cut} in flight when the run time ended" if cut else "") + ")"
            + (f"; {unused} of the pool unused" if unused and s.load_mode == "closed-loop" else "")
            + f"; stored in {path}; {'VALID' if s.valid else 'INVALID: ' + '; '.join(s.invalid_reasons)}")
    return [head, *(f"harness: {ln}" for ln in headline_lines(s, mode))]


def extras_lines(run_path: Any) -> list[str]:
    """What the run recorded beside its requests (GPU telemetry in the steady phase, the profile window, an
    over-saturation cut, prefix reuse), as bench-pd prints it; [] when its directory cannot be read."""
    try:
        return extra_lines(run_extras(Run(run_path)))
    except (HarnessError, OSError):
        return []


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
