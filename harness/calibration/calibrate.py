"""The calibration pipeline: one machine's runs -> fitted constants -> calibration/<machine>.json."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.calibration.file import default_path, save_calibration
from harness.calibration.fit import DEFAULT_BOOTSTRAP, fit_calibration
from harness.calibration.record import CalibrationRecord
from harness.calibration.runs import load_machine_runs
from harness.errors import HarnessError


def parse_proxy(items: list[str] | None) -> dict[str, str]:
    """["a100-80gb-sxm=cpu", "nic-200g=memcpy:h2h"] -> {target: measured}; targets must be catalog names."""
    from harness.specs.gpus import GPUS
    from harness.specs.links import LINKS

    out: dict[str, str] = {}
    for item in items or []:
        target, sep, measured = item.partition("=")
        target, measured = target.strip(), measured.strip()
        if not sep or not target or not measured:
            raise HarnessError(f"--proxy: got {item!r}; write TARGET=MEASURED, e.g. a100-80gb-sxm=cpu or nic-200g=pcie:h2d.")
        if target not in GPUS and target not in LINKS:
            raise HarnessError(
                f"--proxy: {target!r} is neither a GPU nor a link of the spec catalog; known GPUs: {', '.join(GPUS)}; "
                f"links: {', '.join(LINKS)}."
            )
        out[target] = measured
    return out


def check_proxy(rec: CalibrationRecord) -> None:
    from harness.specs.gpus import GPUS

    links = {k for lf in rec.links for k in (lf.key, lf.link, f"{lf.link}:{lf.direction}")}
    for target, measured in rec.proxy.items():
        have = rec.devices if target in GPUS else sorted(links)
        if measured not in have:
            raise HarnessError(
                f"--proxy {target}={measured}: nothing named {measured!r} was measured in these runs; measured: "
                f"{', '.join(have) or 'none'}."
            )


def calibrate(results: str | Path, out: str | Path | None = None, seed: int = 0, n_bootstrap: int = DEFAULT_BOOTSTRAP,
              proxy: dict[str, str] | None = None) -> tuple[CalibrationRecord, Path]:
    """Fit the constants of the runs below `results` (one machine) and write the calibration file."""
    rec = fit_calibration(load_machine_runs(results), seed=seed, n_bootstrap=n_bootstrap)
    rec = replace(rec, proxy=dict(proxy or {}))
    check_proxy(rec)
    if out is None:
        target = default_path(rec.machine)
    elif str(out).endswith(("/", "\\")) or Path(out).is_dir():  # a directory: <dir>/<machine>.json
        target = Path(out) / f"{rec.machine}.json"
    else:
        target = Path(out)
    path = save_calibration(rec, target)
    return rec, path
