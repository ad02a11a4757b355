"""`harness nightly`: measure (micro suites), calibrate, report, append to the history, detect drift.

Each step that cannot run here (a module not installed, a calibration the quick suites cannot fit)
is skipped with its reason, and the rest still runs. The result names every constant's status and
the report path; drift makes the caller exit 3.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.calibration.calibrate import calibrate
from harness.errors import HarnessError
from harness.nightly.constants import calibration_constants, micro_constants
from harness.nightly.drift import DriftOptions, DriftResult, detect_drift
from harness.nightly.history import append_history, contains_run, load_history
from harness.nightly.report import render_nightly
from harness.report.calibration import ReportOptions, render
from harness.store import Run
from microbench.runner import run_micro


@dataclass(frozen=True)
class NightlyOptions:
    results_dir: str = "results"
    history_dir: str = "results/history"
    report_dir: str = "reports/nightly"
    quick: bool = False
    suites: str = "all"
    device: str = "auto"
    seed: int = 0
    from_runs: tuple[str, ...] = ()  # append these stored micro runs instead of measuring
    calibrate: bool = True
    drift: DriftOptions = field(default_factory=DriftOptions)
    command_line: tuple[str, ...] = ()


@dataclass(frozen=True)
class NightlyResult:
    run_ids: tuple[str, ...]
    machine: str
    steps: tuple[tuple[str, str, str], ...]  # (step, "done" | "skipped" | "failed", detail)
    drift: tuple[DriftResult, ...]
    report: str
    history_files: tuple[str, ...]

    @property
    def drifted(self) -> list[DriftResult]:
        return [r for r in self.drift if r.status == "drift"]

    def to_dict(self) -> dict[str, Any]:
        return {"run_ids": list(self.run_ids), "machine": self.machine, "report": self.report,
                "steps": [{"step": s, "status": st, "detail": d} for s, st, d in self.steps],
                "drifted": [r.constant for r in self.drifted], "history_files": list(self.history_files),
                "constants": [r.to_dict() for r in self.drift]}


def run_nightly(o: NightlyOptions, log=None) -> NightlyResult:
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    steps: list[tuple[str, str, str]] = []
    links: list[tuple[str, str]] = []
    if Path(o.history_dir).resolve() == Path(o.results_dir).resolve():
        raise HarnessError("--history must not be the results directory itself; use e.g. results/history/.")

    # 1. measure
    runs: list[Any] = []
    if o.from_runs:
        for p in o.from_runs:
            r = Run(p)
            if r.manifest.kind != "micro":
                raise HarnessError(f"--from-run {p}: a {r.manifest.kind!r} run; the nightly history takes micro runs.")
            runs.append(r)
        steps.append(("micro", "skipped", f"--from-run given: appending {len(runs)} stored run(s) instead of measuring"))
    else:
        say(f"nightly: micro suites {o.suites}{' (quick)' if o.quick else ''} -> {o.results_dir}")
        s = run_micro(o.suites, quick=o.quick, out=o.results_dir, device=o.device, seed=o.seed,
                      command_line=list(o.command_line) or ["harness", "nightly"])
        runs.append(Run(s.path))
        steps.append(("micro", "done", f"{len(s.cases)} case(s), {len(s.skips)} skip(s), {len(s.invalid)} invalid -> {s.path}"))
    machines = sorted({r.manifest.machine for r in runs})
    if len(machines) != 1:
        raise HarnessError(f"--from-run: runs of several machines ({', '.join(machines)}); give one machine's runs.")
    machine = machines[0]
    newest = max(runs, key=lambda r: r.manifest.created_unix_s)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(newest.manifest.created_unix_s))
    out_dir = Path(o.report_dir) / f"{machine}-{stamp}"

    # 2. calibration and its report (from the newest run)
    rec = None
    if not o.calibrate:
        steps.append(("calibration", "skipped", "--no-calibrate"))
    else:
        try:
            rec, cal_path = calibrate(newest.path, out_dir / "calibration.json")
            steps.append(("calibration", "done", f"{cal_path}"))
        except HarnessError as exc:
            steps.append(("calibration", "skipped", f"these runs cannot be fitted: {exc}"))
        if rec is not None:
            try:
                paths = render(newest.path, out_dir / "calibration", ReportOptions(calibration=str(out_dir / "calibration.json")))
                html = next((str(p) for p in paths if p.name == "index.html"), str(out_dir / "calibration"))
                links.append(("calibration", html))
                steps.append(("calibration report", "done", html))
            except HarnessError as exc:
                steps.append(("calibration report", "skipped", str(exc)))
        else:
            steps.append(("calibration report", "skipped", "no calibration this run"))

    # 3. history
    files = []
    for r in sorted(runs, key=lambda r: r.manifest.created_unix_s):
        m = r.manifest
        if contains_run(o.history_dir, m.run_id):
            steps.append(("history", "skipped", f"{m.run_id} is already in the history"))
            continue
        rows = micro_constants(r)
        if r is newest and rec is not None:
            rows += calibration_constants(rec)
        f = append_history(o.history_dir, rows, machine=m.machine, run_id=m.run_id, created_unix_s=m.created_unix_s)
        if f is not None:
            files.append(str(f))
    steps.append(("history", "done", f"{len(files)} file(s) appended under {o.history_dir}"))

    # 4. drift and the report
    hist = load_history(o.history_dir, machine=machine)
    results = detect_drift(hist, o.drift, latest_run=newest.manifest.run_id)
    paths = render_nightly(hist, results, out_dir, o.drift, steps, links)
    report = next(str(p) for p in paths if p.name == "index.html")
    return NightlyResult(tuple(r.manifest.run_id for r in runs), machine, tuple(steps), tuple(results), report, tuple(files))
