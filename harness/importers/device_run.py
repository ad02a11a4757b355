"""A returned device-check tarball (microbench/device_check.sh's run.tar.gz) -> the results store.

The tarball holds results/<machine>/<run_id>/ (the run the suites wrote on the device machine, named
there by its own machine name), checks/ and facts.json. Each run is copied into <out>/<machine>/<run_id>/
as it is (a run is written once: an existing one is refused), with the tarball's checks.json beside its
manifest as device_checks.json. Members are checked before extraction: no absolute paths, no '..', no
links, only regular files and folders.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import HarnessError


def _safe_members(tar: tarfile.TarFile, source: str) -> list[tarfile.TarInfo]:
    out = []
    for m in tar.getmembers():
        p = Path(m.name)
        if p.is_absolute() or ".." in p.parts:
            raise HarnessError(f"{source}: member {m.name!r} points outside the archive; not a device-check tarball.")
        if not (m.isfile() or m.isdir()):
            raise HarnessError(f"{source}: member {m.name!r} is a link or device file; not a device-check tarball.")
        out.append(m)
    return out


TARBALL = "run.tar.gz"  # what microbench/device_check.sh leaves in its output folder


def import_device_run(tarball: str | Path, out: str | Path = "results") -> dict[str, Any]:
    """File every run of `tarball` (a run.tar.gz, or the output folder holding it) under out/<machine>/<run_id>/;
    returns what was filed."""
    from harness.store import iter_runs

    src = Path(tarball)
    if src.is_dir() and (src / TARBALL).is_file():  # the device check's output folder ($OUT, the run's files_at)
        src = src / TARBALL
    if not src.is_file():
        raise HarnessError(f"import-device: {str(src)!r} does not exist; give the run.tar.gz that microbench/device_check.sh "
                           "left in its output folder, or that folder.")
    try:
        tar = tarfile.open(src, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise HarnessError(f"import-device: {src} is not a tar archive ({exc}); give device_check.sh's run.tar.gz.") from None
    with tar, tempfile.TemporaryDirectory(prefix="harness-import-device-") as tmp:
        tar.extractall(tmp, members=_safe_members(tar, str(src)))
        root = Path(tmp)
        results = root / "results"
        runs = list(iter_runs(results)) if results.is_dir() else []
        if not runs:
            raise HarnessError(f"import-device: {src} holds no run (no results/<machine>/<run_id>/manifest.json); the suites "
                               "step did not run or died before writing — see checks.json and device_check.log.")
        checks = _checks(root)
        filed = []
        for r in runs:
            target = Path(out) / r.manifest.machine / r.manifest.run_id
            if target.exists():
                raise HarnessError(f"import-device: {target} exists already; a run is written once (remove it to import again).")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(r.path, target)
            if checks is not None:
                (target / "device_checks.json").write_text(json.dumps(checks, indent=2))
            filed.append({"path": str(target), "machine": r.manifest.machine, "run_id": r.manifest.run_id,
                          "status": r.manifest.status})
    return {"tarball": str(src), "runs": filed, "checks": sorted((checks or {}).get("checks", {}))}


def _checks(root: Path) -> dict[str, Any] | None:
    d = root / "checks"
    if not d.is_dir():
        return None
    got = {}
    for f in sorted(d.glob("*.json")):
        try:
            got[f.stem] = json.loads(f.read_text())
        except json.JSONDecodeError:
            got[f.stem] = {"error": "unreadable"}
    return {"checks": got}
