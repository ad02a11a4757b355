#!/usr/bin/env bash
# Wheels the device loop needs on a lent GPU machine (no network there): microbench/device_wheels.sh's (pydantic, gguf,
# orjson, tomli-w, nvtx and their own) plus the load generator, Locust, and what it needs that the device image lacks
# (the image has flask's click/jinja2/markupsafe/werkzeug, msgpack, psutil, requests, h11 and pytest). Run here, where
# pip reaches the registry; microbench/device_loop.sh installs .whl/ into /tmp/harness-site when python3 lacks them.
# Usage (from the repository root): microbench/device_loop_wheels.sh [PYTHON_VERSION]   (default 3.12, the image's)
# Versions: the ones installed in .venv (the device runs what the tests ran).
set -euo pipefail
PYV="${1:-3.12}"
microbench/device_wheels.sh "$PYV" > /dev/null
PKGS="locust configargparse flask flask-cors flask-login gevent geventhttpclient pyzmq python-engineio python-socketio
bidict simple-websocket wsproto brotli greenlet zope.event zope.interface blinker itsdangerous"
PLAT=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux_2_5_x86_64 manylinux1_x86_64 any; do
  PLAT="$PLAT --platform $p"
done
for pkg in $PKGS; do
  ver=$(.venv/bin/python -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' || true)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp $PLAT \
    -d .whl "$pkg${ver:+==$ver}"
done
du -sh .whl
