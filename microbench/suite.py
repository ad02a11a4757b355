"""What a suite is: a module with NAME, DESCRIPTION and `cases(ctx)` yielding planned cases or skips.

A planned case is a name and a thunk returning one or more CaseResults; the runner counts them
first (for the progress bar), then runs each inside an NVTX range. The registry SUITES maps a
suite name to its module; add one line per suite.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Union

from harness.errors import HarnessError
from harness.specs.host import HostSpec
from microbench.backends import Backend, Detected
from microbench.case import CaseResult, Peak, Skip, Work
from microbench.timing import Measurement, TimingPolicy

SUITES: dict[str, str] = {
    "gemm": "microbench.gemm",
    "decode": "microbench.decode",
    "stage": "microbench.stage",
    "transfer": "microbench.transfer",
    "comm": "microbench.comm",
    "moe": "microbench.moe",
    "storage": "microbench.storage",
    "precision": "microbench.precision",
    "mixed_step": "microbench.mixed_step",
    "cuda_graphs": "microbench.cuda_graphs",
    "allocator": "microbench.allocator",
    "offload": "microbench.offload",
}


@dataclass
class Planned:
    suite: str
    case: str
    run: Callable[[], Union[CaseResult, list[CaseResult]]]


Item = Union[Planned, Skip]


@dataclass
class SuiteContext:
    quick: bool
    policy: TimingPolicy
    host: HostSpec
    detected: Detected
    seed: int = 0
    storage_path: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def backends(self) -> list[Backend]:
        return self.detected.backends

    def backend(self, label: str) -> Backend | None:
        return next((b for b in self.backends if b.label == label), None)

    def result(self, suite: str, case: str, b: Backend, dtype: str, params: dict, work: Work, m: Measurement,
               peak: Peak | None = None, cache_state: str = "", notes: tuple[str, ...] = (),
               tables: dict[str, list[dict[str, Any]]] | None = None) -> CaseResult:
        return CaseResult(suite, case, b.name, b.device, dtype, params, work, m, peak or b.peak(dtype), cache_state, tuple(notes),
                          tables=tables or {})


def suite_module(name: str) -> Any:
    if name not in SUITES:
        raise HarnessError(f"--suite: no suite {name!r}. Known: {', '.join(SUITES)} (list them with `harness micro list`).")
    return importlib.import_module(SUITES[name])


def parse_suites(spec: str) -> list[str]:
    """'gemm,decode' or 'all' -> validated, de-duplicated suite names in the order given."""
    names = list(SUITES) if spec.strip() == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise HarnessError(f"--suite: got {spec!r}; give one or more of {', '.join(SUITES)} separated by commas, or 'all'.")
    for n in names:
        suite_module(n)
    return list(dict.fromkeys(names))


def plan(names: list[str], ctx: SuiteContext) -> Iterator[Item]:
    for n in names:
        yield from suite_module(n).cases(ctx)
