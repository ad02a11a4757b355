"""Look up a renderer of harness.report.RENDERERS by name, pick one by the kinds of the runs found, render.

Every entry follows harness.report.renderer.Renderer and its module declares RUN_KINDS; nothing here
inspects signatures. `harness report` is `report(path, to, renderer, options)`.
"""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from types import ModuleType

from harness.errors import HarnessError
from harness.report.renderer import Renderer, ReportOptions

# the run kinds looked at first when a folder holds several kinds
KIND_PRIORITY = ("micro", "load")


def _module(name: str) -> tuple[ModuleType, str]:
    from harness.report import RENDERERS

    if name not in RENDERERS:
        raise HarnessError(f"--renderer: no renderer {name!r}; known: {', '.join(sorted(RENDERERS))}.")
    modname, _, fn = RENDERERS[name].partition(":")
    return importlib.import_module(modname), fn


def renderer(name: str) -> Renderer:
    """The render function registered as `name`."""
    mod, fn = _module(name)
    return getattr(mod, fn)


def run_kinds(name: str) -> tuple[str, ...]:
    """The manifest kinds the renderer `name` renders by default (its module's RUN_KINDS)."""
    return tuple(getattr(_module(name)[0], "RUN_KINDS", ()))


def pick_renderer(path: str | Path) -> str:
    """The renderer for the runs below `path`: by the most relevant run kind found."""
    from harness.report import RENDERERS
    from harness.store import iter_runs

    p = Path(path)
    if not p.exists():
        raise HarnessError(f"{p} does not exist; give a run directory or results/<machine>/.")
    kinds = Counter(r.manifest.kind for r in iter_runs(p))
    if not kinds:
        raise HarnessError(f"no runs below {p} (no manifest.json found); run `harness micro run` or `make bench-pd` first.")
    ordered = [k for k in KIND_PRIORITY if k in kinds] + [k for k, _ in kinds.most_common() if k not in KIND_PRIORITY]
    for kind in ordered:
        for name in RENDERERS:
            if kind in run_kinds(name):
                return name
    raise HarnessError(
        f"no renderer for runs of kind {', '.join(kinds)} below {p}; known renderers: {', '.join(sorted(RENDERERS))} "
        "(choose one with --renderer)."
    )


def report(path: str | Path, to: str | Path | None = None, name: str | None = None,
           options: ReportOptions | None = None) -> list[Path]:
    """Render the runs at `path` into `to` (default reports/<name of path>/) with renderer `name` (default: picked)."""
    fn = renderer(name or pick_renderer(path))
    out = Path(to) if to else Path("reports") / (Path(path).resolve().name or "report")
    return list(fn(path, out, options or ReportOptions()))
