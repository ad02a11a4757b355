"""One load run in a child process: run workloads.loadrun on a LoadConfig, relay its progress, return the run.

The child writes the run (manifest, requests table, summary) itself; this side only starts it, hands its
progress lines to a Progress (harness.bench.progress), bounds its time and stops it (terminate, then kill) when interrupted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from harness.bench.progress import Progress
from harness.errors import HarnessError
from workloads.config import LoadConfig


def run_load(cfg: LoadConfig, workdir: Path, *, progress: Progress | None = None, timeout_s: float | None = None) -> Path:
    """Run workloads.loadrun on `cfg` in a child process; returns the run directory. `progress` (None: nothing shown)
    gets every progress line of the load process, and close() when the run ends, however it ends."""
    cfg_path = cfg.save(workdir / "load-config.json")
    cmd = [sys.executable, "-m", "workloads.loadrun", str(cfg_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    remote_note = cfg.remote_workers > 0
    run_dir = None
    deadline = time.monotonic() + (timeout_s or 3600.0)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "progress" in msg and progress is not None:
                progress.update(msg["progress"])
            elif "waiting_for_workers" in msg and remote_note:
                w = msg["waiting_for_workers"]
                print(f"waiting for {w['expected']} Locust worker(s) on {w['master']}; on each worker host run:\n  {w['command']}",
                      file=sys.stderr, flush=True)
            elif "run_dir" in msg:
                run_dir = Path(msg["run_dir"])
            if time.monotonic() > deadline:
                raise HarnessError(f"the load process ran past its bound of {timeout_s:g} s and was stopped.")
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        # Ctrl-C reached the load process too (same process group): it records what is in flight as cancelled;
        # give it the time to, then read where the run went
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        for line in (out or "").splitlines():
            if '"run_dir"' in line:
                run_dir = Path(json.loads(line)["run_dir"])
        kept = [ln for ln in (err or "").splitlines() if ln.startswith("interrupted:")]
        if run_dir is not None:
            raise LoadInterrupted(kept[-1] if kept else f"interrupted; the records measured so far are in {run_dir}", run_dir) from None
        raise
    except (subprocess.TimeoutExpired, HarnessError):
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        if progress is not None:
            progress.close(simulated=bool(cfg.engine.get("simulated")))
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode == 130 and run_dir is not None:  # interrupted: what it kept is stored, and it said what
        kept = [ln for ln in err.splitlines() if ln.startswith("interrupted:")]
        raise LoadInterrupted(kept[-1] if kept else f"interrupted; the records measured so far are in {run_dir}", run_dir)
    if proc.returncode != 0 or run_dir is None:
        msg = [ln for ln in err.splitlines() if ln.startswith("error:")]
        if msg:
            raise HarnessError(msg[-1].removeprefix("error: "))
        # kept where the user looks (the run, else the results directory), not in the temporary folder removed after the run
        log = (run_dir / "load-process.log") if run_dir else Path(cfg.results_dir) / f"load-process-{cfg.run_id}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(err)
        except OSError:
            log = None
        how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with status {proc.returncode}"
        last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        where = f" in {run_dir}" if run_dir else ""
        raise HarnessError(f"the load process {how} without an error message; its last line: {last[0][:300]}"
                           f"{f' (whole log: {log})' if log else ''}. Records it had stored are kept{where}.")
    return run_dir


class LoadInterrupted(HarnessError):
    """The load run was stopped by SIGINT/SIGTERM; the run directory holds what it measured (exit 130)."""

    exit_code = 130

    def __init__(self, message: str, run_dir: Path):
        super().__init__(message)
        self.run_dir = run_dir
