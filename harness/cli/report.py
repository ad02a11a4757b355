"""Render a report from stored results (never measures): one self-contained HTML file plus a Markdown summary."""

from __future__ import annotations

import argparse
import importlib
import inspect
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from harness.errors import HarnessError

# run kind -> renderer, used when a renderer module does not declare RUN_KINDS itself
KIND_DEFAULTS = {"micro": "calibration", "load": "bench-pd"}
KIND_PRIORITY = ("micro", "load")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="RUN_OR_DIR", help="a run directory, results/<machine>/, or results/")
    parser.add_argument("--to", metavar="DIR", help="output directory (default reports/<name of RUN_OR_DIR>/)")
    parser.add_argument("--renderer", help="renderer to use (default: picked by the kind of the runs found)")
    parser.add_argument("--scenario", metavar="FILE", help="scenario the calibration report re-plans (default ch9-hetero-pd)")
    parser.add_argument("--calibration", metavar="FILE", help="use this calibration file instead of fitting the runs")
    parser.add_argument("--proxy", default="auto", metavar="auto|none|GPU=DEVICE,...",
                        help="which measured device stands for scenario GPUs not measured themselves (default auto)")
    parser.add_argument("--load", metavar="DIR", help="directory with end-to-end load runs to compare with the model")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap resamples (default 200)")


def _renderer(name: str) -> tuple[Callable[..., Any], Any]:
    from harness.report import RENDERERS

    if name not in RENDERERS:
        raise HarnessError(f"--renderer: no renderer {name!r}; known: {', '.join(sorted(RENDERERS))}.")
    modname, _, fn = RENDERERS[name].partition(":")
    mod = importlib.import_module(modname)
    return getattr(mod, fn), mod


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
        for name, target in RENDERERS.items():
            try:
                mod = importlib.import_module(target.partition(":")[0])
            except ImportError:
                continue
            if kind in getattr(mod, "RUN_KINDS", ()):
                return name
        if KIND_DEFAULTS.get(kind) in RENDERERS:
            return KIND_DEFAULTS[kind]
    raise HarnessError(
        f"no renderer for runs of kind {', '.join(kinds)} below {p}; known renderers: {', '.join(sorted(RENDERERS))} "
        "(choose one with --renderer)."
    )


def report(path: str | Path, to: str | Path | None = None, renderer: str | None = None, **options: Any) -> list[Path]:
    name = renderer or pick_renderer(path)
    fn, mod = _renderer(name)
    out = Path(to) if to else Path("reports") / (Path(path).resolve().name or "report")
    if "options" in inspect.signature(fn).parameters and hasattr(mod, "ReportOptions"):
        return list(fn(path, out, mod.ReportOptions(**options)))
    return list(fn(path, out))


def main(args: argparse.Namespace) -> int:
    written = report(args.path, args.to, args.renderer, scenario=args.scenario, calibration=args.calibration,
                     proxy=args.proxy, load=args.load, seed=args.seed, n_bootstrap=args.bootstrap)
    for p in written:
        print(p)
    return 0
