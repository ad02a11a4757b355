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
            elif "run_dir" in msg:
                run_dir = Path(msg["run_dir"])
            if time.monotonic() > deadline:
                raise HarnessError(f"the load process ran past its bound of {timeout_s:g} s and was stopped.")
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, HarnessError, KeyboardInterrupt):
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
    if proc.returncode != 0 or run_dir is None:
        msg = [ln for ln in err.splitlines() if ln.startswith("error:")]
        if msg:
            raise HarnessError(msg[-1].removeprefix("error: "))
        raise RuntimeError(f"load process failed (exit {proc.returncode}):\n{err[-3000:]}")
    return run_dir
