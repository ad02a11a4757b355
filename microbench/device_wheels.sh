#!/usr/bin/env bash
# Wheels of the dependencies a GPU image's Python lacks (pydantic, gguf, orjson, tomli-w, nvtx and their own), for
# a lent GPU machine with no network: run here, where pip reaches the registry; carry .whl/ with the device run;
# microbench/device_check.sh installs them into /tmp/harness-site when the image's python3 cannot import them.
# Usage (from the repository root): microbench/device_wheels.sh [PYTHON_VERSION]   (default 3.12, the device image's)
# Versions: the ones installed in .venv (so the device runs what the tests ran), else the newest.
set -euo pipefail
PYV="${1:-3.12}"
DEST=.whl
PKGS="pydantic pydantic-core annotated-types typing-inspection gguf orjson tomli-w nvtx"
PLAT=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any; do
  PLAT="$PLAT --platform $p"
done
mkdir -p "$DEST"
for pkg in $PKGS; do
  ver=$(.venv/bin/python -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' || true)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp $PLAT \
    -d "$DEST" "$pkg${ver:+==$ver}"
done
ls "$DEST"
