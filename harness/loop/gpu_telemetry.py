"""The loops' GPU telemetry step (issue 49): what the GPUs did during each served point, on the loop's time axis.

Each served point's load run samples the GPUs itself (workloads.gpu_telemetry: a child process of the load process,
table `gpu_metrics` of that load run) from this host's NVML when the engine runs here and NVML sees a GPU (`--gpu-nvml
auto`; `on` forces it, `off` stops it) and from every DCGM exporter given with `--gpu-metrics-url [ROLE=]URL`. This
step decides those sources once for the engine, reads each exporter once before the first point (one that gives no
GPU sample is a note: the loop goes on and its rows carry the error), and after each load run copies the run's rows
into the loop run's own `gpu_metrics` table, with:
  t_s          seconds since the loop started (the load run's t0 on the wall clock − the loop's start, + its own t_s)
  point_t_s    seconds since that load run's t0 (the requests' time axis)
  point, repeat, load_run   which served point (index), which repeat of it, the load run's directory
  phase        that load run's phase at the sample (workloads.phases: startup, steady, drain; before / after the run)
The per point, repeat, phase and GPU summary (workloads.gpu_summary through workloads.run_extras, the same one
bench-pd's report shows) goes to `loop_gpu_telemetry.json`, which the loop report (harness.report.loop) renders with
a plot of the table. A
loop without any source (a CPU-only host and no exporter) says so once in its notes: nothing is sampled, nothing fails.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from harness.errors import HarnessError
from harness.loop.options import GpuTelemetryOptions
from harness.loop.output import LoopOutput
from harness.loop.state import LoopState, PlannedPoint, RunResult
from harness.report.loop import LOOP_GPU_FILE
from harness.store import Run
from harness.telemetry.gpu_sample import COLUMN_DTYPES, TABLE
from harness.telemetry.nvml import status as nvml_status
from workloads.extras_options import check_exporters
from workloads.gpu_telemetry import target_is_local
from workloads.phases import LoadPhases
from workloads.run_extras import run_extras

# the columns the loop adds to the load runs' gpu_metrics rows (harness.telemetry.gpu_sample.COLUMN_DTYPES)
LOOP_COLUMN_DTYPES = {"point_t_s": "float64", "point": "Int64", "repeat": "Int64", "load_run": "string", "phase": "string"}


class LoopGpuTelemetry:
    """The GPU telemetry of one loop: `start` before the served points, `collect` after each load run, `finish` before
    the loop run is closed (also a failed one: what was sampled is kept)."""

    def __init__(self, opts: GpuTelemetryOptions, out: LoopOutput):
        self.opts = opts
        self.out = out
        self.t0_unix_ns = time.time_ns()  # the loop's time axis starts here
        self.local = False
        self.nvml = "NVML not asked for (--gpu-nvml off)"
        self.runs: list[dict[str, Any]] = []
        self.started = False
        self.why_none: str | None = None  # why nothing is sampled, when nothing is

    @property
    def sources(self) -> list[str]:
        return (["nvml (local)"] if self.local else []) + [f"dcgm {e['role']} {e['url']}" for e in self.opts.endpoints]

    def start(self, target_url: str, state: LoopState, say: Callable[[str], None] | None = None) -> None:
        """The sources for an engine at `target_url`, each exporter read once; a note when there is none."""
        self.started = True
        why = "--gpu-nvml off"
        if self.opts.nvml != "off":
            ok, self.nvml = nvml_status()
            here = target_is_local(target_url)
            self.local = self.opts.nvml == "on" or (ok and here)
            why = (f"no GPU on this host that NVML can see ({self.nvml})" if not ok else
                   f"the engine at {target_url} runs on another host, so this host's GPUs are not its own ({self.nvml})")
        if not self.sources:
            self.why_none = (f"{why}, and no --gpu-metrics-url was given (a DCGM exporter's /metrics, for an engine on GPUs "
                             "elsewhere)")
            state.note(f"GPU telemetry: none sampled: {self.why_none}. The served points are measured without it.", say)
            return
        for w in check_exporters(list(self.opts.endpoints), warn=lambda _m: None):
            state.note(f"GPU telemetry: {w}", say)

    def load_fields(self) -> dict[str, Any]:
        """The LoadConfig fields of a served point's load run."""
        return {"gpu_local": self.local, "gpu_metrics": list(self.opts.endpoints), "gpu_interval_s": self.opts.interval_s}

    def collect(self, p: PlannedPoint, r: RunResult) -> None:
        """A served point's load run: its samples into the loop's gpu_metrics table, its per-phase summary kept."""
        if not self.sources:
            return
        run = {"point": p.point.index, "mix": p.point.workload, "load": p.point.load_text(), "burst": p.burst,
               "repeat": r.run.repeat, "load_run": r.run.run_dir}
        try:
            self.runs.append({**run, **self._copy(Run(r.run.run_dir), p.point.index, r.run.repeat)})
        except (HarnessError, OSError, ValueError, KeyError) as exc:  # a telemetry read never fails the measured point
            self.runs.append({**run, "start_s": None, "end_s": None, "gpu": None,
                              "error": f"its GPU telemetry could not be read ({type(exc).__name__}: {exc})"[:400]})

    def _copy(self, run: Run, point: int, repeat: int) -> dict[str, Any]:
        """The load run's rows into the loop's table; its span on the loop's axis and its per-phase summary."""
        gpu = run_extras(run).gpu
        start_s = (int(run.manifest.extra.get("t0_unix_ns") or self.t0_unix_ns) - self.t0_unix_ns) / 1e9
        ph = (gpu or {}).get("phases")
        if TABLE in run.tables():
            df = run.table(TABLE)
            df = df[list(COLUMN_DTYPES)].astype(COLUMN_DTYPES)
            df["point_t_s"] = df["t_s"]
            df["t_s"] = df["t_s"] + start_s
            df["point"], df["repeat"], df["load_run"] = point, repeat, str(run.path)
            df["phase"] = LoadPhases(**ph).phase_of(df["point_t_s"].to_numpy(dtype=float)) if ph else None
            self.out.frame(TABLE, df.astype(LOOP_COLUMN_DTYPES))
        return {"start_s": start_s, "end_s": start_s + max(ph["end_s"], ph["steady_end_s"]) if ph else None, "gpu": gpu}

    def document(self) -> dict[str, Any]:
        return {"sources": self.sources, "interval_s": self.opts.interval_s, "nvml": self.nvml, "why_none": self.why_none,
                "t0_unix_ns": self.t0_unix_ns, "runs": self.runs}

    def finish(self) -> None:
        """The summary file, once the served points were reached (a loop that failed before them has none)."""
        if self.started:
            self.out.json(LOOP_GPU_FILE, self.document())


__all__ = ["LOOP_COLUMN_DTYPES", "LoopGpuTelemetry"]
