"""The one live progress printer of a load run (bench-pd, compare-engines, engine --bench-pd).

The load process (workloads.loadrun) prints one JSON progress line a second; `run_load` hands each one's
"progress" dict to a ProgressFn. `print_progress` draws it on one stderr line; `end_progress` ends that line.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

ProgressFn = Callable[[dict[str, Any]], None]


def print_progress(p: dict[str, Any]) -> None:
    """[elapsed / span s] sent, done/expected, errors — redrawn in place on stderr."""
    print(f"\r[{p['t_s']:7.1f} / {p['span_s']:.0f} s] sent {p['sent']:5d}  done {p['done']:5d}/{p['expected']}  "
          f"errors {p['errors']}", end="", file=sys.stderr, flush=True)


def end_progress() -> None:
    """Close the progress line so what follows starts on a line of its own."""
    print(file=sys.stderr)
