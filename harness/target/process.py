"""Start and stop the embedded target as a child process bound to 127.0.0.1, always bounded in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError


@dataclass
class TargetProcess:
    url: str
    info: dict[str, Any]
    proc: subprocess.Popen = field(repr=False)
    log_path: Path = field(repr=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)

    def __enter__(self) -> "TargetProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_target(args: list[str], *, startup_timeout_s: float = 60.0, max_lifetime_s: float = 3600.0) -> TargetProcess:
    """Run `python -m harness.target ARGS` on a free 127.0.0.1 port; wait until it listens."""
    d = Path(tempfile.mkdtemp(prefix="harness-target-"))
    ready = d / "ready.json"
    log = d / "target.log"
    cmd = [sys.executable, "-m", "harness.target", *args, "--host", "127.0.0.1", "--port", "0",
           "--ready-file", str(ready), "--max-lifetime-s", str(max_lifetime_s)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if ready.exists():
            meta = json.loads(ready.read_text())
            return TargetProcess(meta["url"], meta.get("info", {}), proc, log)
        if proc.poll() is not None:
            raise HarnessError(f"the simulated target exited (code {proc.returncode}) before listening:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise HarnessError(f"the simulated target did not start within {startup_timeout_s:g} s; its log: {log}")
