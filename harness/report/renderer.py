"""The one renderer protocol: what every entry of harness.report.RENDERERS is, and the options it gets.

A renderer reads stored results only (never measures) and writes its files into `out_dir`:

    render(source, out_dir, options) -> list[Path]

`source` is a run directory, a folder of runs (results/<machine>/, results/), a stored `Run`, or a list of
run directories (compare); `options` is the one `ReportOptions` record `harness report` builds from its flags,
of which each renderer reads the fields it uses (and says in its docstring which). A renderer module also
declares `RUN_KINDS`, the manifest kinds it renders by default (`harness report` picks by them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence, Union

if TYPE_CHECKING:
    from harness.store import Run

RunSource = Union[str, Path, "Run", Sequence[Union[str, Path]]]


@dataclass(frozen=True)
class ReportOptions:
    """The options of `harness report`, one record for every renderer."""

    scenario: str | None = None  # the scenario a renderer re-plans (default: the chapter's 4×A100 + 4×H20 scenario)
    calibration: str | None = None  # a calibration file instead of fitting the runs
    proxy: str = "auto"  # "auto", "none", or "gpu=device,gpu=device"
    seed: int = 0  # bootstrap seed
    n_bootstrap: int = 200  # bootstrap resamples
    load: str | None = None  # a directory with load runs to compare with the model


class Renderer(Protocol):
    def __call__(self, source: RunSource, out_dir: str | Path, options: ReportOptions | None = None) -> list[Path]: ...
