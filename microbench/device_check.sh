#!/usr/bin/env bash
# One prepared run for a lent H200: every suite in --quick form, then the three device checks.
# Usage (from the repository root): microbench/device_check.sh OUT_DIR     (about 8 minutes)
# Writes OUT_DIR/results/<machine>/<run_id>/ (the run directory), OUT_DIR/run.tar.gz (the same,
# packed, for machines that return few files), OUT_DIR/checks.json, and the logs.
# Uses the machine's python3 (it has torch, triton, pandas, pyarrow, nvidia-ml-py); the harness
# runs from this source tree. Reads the card's state only: never changes clocks or power.
set -uo pipefail
OUT_DIR="${1:?usage: microbench/device_check.sh OUT_DIR}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit \
  --format=csv > "$OUT_DIR/nvidia-smi.csv" 2>&1 || echo "nvidia-smi failed" >> "$OUT_DIR/nvidia-smi.csv"
# The suites through the runner directly (the full CLI imports the scenario code, which needs pydantic, absent there).
timeout 390 "$PY" -m microbench.device_check --suites --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/micro.log"
tar -czf "$OUT_DIR/run.tar.gz" -C "$OUT_DIR" results 2>/dev/null || true
timeout 150 "$PY" -m microbench.device_check --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/checks.log"
