#!/usr/bin/env bash
# The one prepared run for a lent GPU machine (H200): five acceptance checks, then the suites in --quick form.
# Usage (from the repository root): microbench/device_check.sh OUT_DIR        (at most 6 minutes)
#
# Fits the device machine's return channel (at most 8 files, 2 folders deep): everything is written under
# WORK (/tmp/harness-device-check-<pid>, or $DEVICE_CHECK_WORK); OUT_DIR receives only
#   checks.json          rewritten after every check (a check that died or timed out is there with its status)
#   run.tar.gz           WORK packed: results/<machine>/<run_id>/ (the suites' run), checks/, facts.json
#   device_check.log     everything printed
# Each check is its own process with its own time limit, so one failure loses nothing else; the whole
# script stops starting work at DEADLINE_S (default 330 s) and then packs what it has.
# `harness micro import-device OUT_DIR/run.tar.gz` files the run into results/ under the device's machine name.
# Env: PYTHON (default python3: the device image's, with torch, triton, cupy, pandas, pyarrow, nvidia-ml-py;
# no network: what it lacks (pydantic, gguf, ...) comes as wheels in .whl/, made here by microbench/device_wheels.sh
# and carried with the run), SUITES (default gemm,decode,transfer,stage; the Chapter 19 suites with
# microbench/device_check_ch19.sh), CHECKS (default: all five; "none" for the suites only),
# HARNESS_DEVICE_CHECK_STUB=1 (no GPU: stub checks and a synthetic run, to test the packaging).
# Reads the card's state only: never changes clocks, power, MIG or persistence mode; device "cuda" only.
set -uo pipefail
OUT_DIR="${1:?usage: microbench/device_check.sh OUT_DIR}"
PY="${PYTHON:-python3}"
WORK="${DEVICE_CHECK_WORK:-/tmp/harness-device-check-$$}"
DEADLINE_S="${DEADLINE_S:-330}"
SUITES="${SUITES:-gemm,decode,transfer,stage}"
CHECKS="${CHECKS:-d2d_copy gemm_large gemm_small_graph pinned_sweep decode_mbu}"
[ "$CHECKS" = "none" ] && CHECKS=""
STUB=""
[ "${HARNESS_DEVICE_CHECK_STUB:-0}" = "1" ] && STUB="--stub"
mkdir -p "$OUT_DIR" "$WORK/checks"
LOG="$OUT_DIR/device_check.log"
: > "$LOG"
# the image's python3 lacks our pure dependencies: install the carried wheels (microbench/device_wheels.sh) first
if [ -d .whl ] && ! "$PY" -c "import pydantic, gguf, orjson" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/harness-site .whl/*.whl \
    && export PYTHONPATH="/tmp/harness-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
SECONDS=0
ATTEMPTED=""

# per-check limits (s): the five checks, then the suites get what is left before the deadline
declare -A LIMIT=([d2d_copy]=40 [gemm_large]=50 [gemm_small_graph]=40 [pinned_sweep]=50 [decode_mbu]=80)

step() {  # step NAME LIMIT_S: run one check in its own process, record its status, rewrite checks.json
  local name="$1" limit="$2" left=$((DEADLINE_S - SECONDS - 15))
  ATTEMPTED="${ATTEMPTED:+$ATTEMPTED,}$name"
  if [ "$left" -le 5 ]; then
    echo "$name: not started, the ${DEADLINE_S} s deadline is near" | tee -a "$LOG"
    echo "not-started" > "$WORK/checks/$name.rc"
  else
    [ "$limit" -gt "$left" ] && limit="$left"
    echo "== $name (limit ${limit} s, ${SECONDS} s elapsed)" >> "$LOG"
    timeout --kill-after=5 "$limit" "$PY" -m microbench.device_check check "$name" --work "$WORK" --suites "$SUITES" $STUB >> "$LOG" 2>&1
    echo "$?" > "$WORK/checks/$name.rc"
    tail -n 1 "$LOG"
  fi
  "$PY" -m microbench.device_check collect --work "$WORK" --out "$OUT_DIR/checks.json" --attempted "$ATTEMPTED" >> "$LOG" 2>&1
}

{
  echo "device check: work in $WORK, out $OUT_DIR, deadline ${DEADLINE_S} s${STUB:+, STUB mode (no GPU)}"
  if [ -z "$STUB" ]; then
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,temperature.memory,power.draw,power.limit \
      --format=csv 2>&1 | tee "$WORK/nvidia-smi.csv"
  fi
} >> "$LOG" 2>&1
timeout 20 "$PY" -m microbench.device_check facts --work "$WORK" $STUB >> "$LOG" 2>&1
for c in $CHECKS; do
  step "$c" "${LIMIT[$c]:-60}"
done
[ -n "$SUITES" ] && [ "$SUITES" != "none" ] && step suites 600
timeout 30 "$PY" -m microbench.device_check package --work "$WORK" --out "$OUT_DIR/run.tar.gz" >> "$LOG" 2>&1 \
  || tar -czf "$OUT_DIR/run.tar.gz" -C "$WORK" . >> "$LOG" 2>&1
echo "done in ${SECONDS} s: $OUT_DIR/checks.json, $OUT_DIR/run.tar.gz, $LOG" | tee -a "$LOG"
