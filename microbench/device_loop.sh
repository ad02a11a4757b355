#!/usr/bin/env bash
# The closed loop on a lent GPU in one call (issue 47): the image checked, the torch suites, a random 8B model,
# llama.cpp's own kernels and step times, two twins of llama-server, served load on llama-server, the comparison.
# Usage (from the repository root): microbench/device_loop.sh OUT [--device cuda|cpu]      (at most 9 minutes)
#   --device cuda (default): the lent GPU; needs .gpu-engine/llama-cuda.tar.xz (make gpu-engine) and .whl/
#                            (microbench/device_loop_wheels.sh), both carried with the call (docs/gpu-loop.md)
#   --device cpu:            the dry run on a CPU: llama.cpp's CPU build from the venv, a tiny model, short points
# Everything is written under WORK (/tmp/harness-device-loop-<pid>, or $DEVICE_LOOP_WORK); OUT receives only
#   checks.json       rewritten after every step (a step that died or timed out is there with its status)
#   run.tar.gz        WORK packed without the model: results/<machine>/<run_id>/ (the suites' run, llama.cpp's micro
#                     run, the load runs, the loop-gpu-device run with the comparison), predictions, twins, served.jsonl
#   device_loop.log   everything printed
# Each step is its own process with its own time limit; the whole call is bounded by BUDGET_S (default 540 s): the
# served step gets what the others left, less the time to compare and pack.
# `harness micro import-device OUT/run.tar.gz` files the runs; docs/gpu-loop.md says how to read the comparison.
# Env: PYTHON (default python3), BUDGET_S, SUITES (torch suites; default gemm,decode,transfer on cuda, none on cpu),
# DEVICE_LOOP_WORK. Reads the card's state only: never changes clocks, power, MIG or persistence mode.
set -uo pipefail
OUT_DIR="${1:?usage: microbench/device_loop.sh OUT [--device cuda|cpu]}"
DEVICE=cuda
[ "${2:-}" = "--device" ] && DEVICE="${3:?--device needs cuda or cpu}"
case "$DEVICE" in cuda|cpu) ;; *) echo "error: --device $DEVICE: give cuda or cpu" >&2; exit 2 ;; esac
PY="${PYTHON:-python3}"
WORK="${DEVICE_LOOP_WORK:-/tmp/harness-device-loop-$$}"
BUDGET_S="${BUDGET_S:-540}"
if [ "$DEVICE" = cuda ]; then SUITES="${SUITES:-gemm,decode,transfer}"; else SUITES="${SUITES:-none}"; fi
RESERVE_S=45  # compare + pack after the served step
mkdir -p "$OUT_DIR" "$WORK/checks"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
LOG="$OUT_DIR/device_loop.log"
: > "$LOG"
SECONDS=0
START_UNIX=$(date +%s)

# the image's python3 lacks some of our pure dependencies and the load generator: install the carried wheels first
if [ -d .whl ] && ! "$PY" -c "import pydantic, gguf, orjson, locust" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/harness-site .whl/*.whl >> "$LOG" 2>&1 \
    && export PYTHONPATH="/tmp/harness-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

collect() { "$PY" -m harness.bench.device_loop collect --work "$WORK" --out "$OUT_DIR/checks.json" >> "$LOG" 2>&1; }

step() {  # step NAME LIMIT_S CMD...: one step in its own process group, bounded; its exit status kept; checks.json rewritten
  local name="$1" limit="$2"; shift 2
  local left=$((BUDGET_S - SECONDS - RESERVE_S))
  [ "$name" = compare ] && left=$((BUDGET_S - SECONDS - 10))
  if [ "$left" -le 5 ]; then
    echo "== $name: not started, the ${BUDGET_S} s budget is spent (${SECONDS} s elapsed)" | tee -a "$LOG"
    echo "not-started" > "$WORK/checks/$name.rc"
  else
    [ "$limit" -gt "$left" ] && limit="$left"
    echo "== $name (limit ${limit} s, ${SECONDS} s elapsed)" | tee -a "$LOG"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
    local rc=$?
    echo "$rc" > "$WORK/checks/$name.rc"
    echo "$((SECONDS - t0))" > "$WORK/checks/$name.wall_s"
    echo "   $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$LOG"
  fi
  collect
}

# ---- 1. the image: driver, libraries, the engine's binaries and what they load
if [ "$DEVICE" = cuda ]; then
  ENGINE_TAR=.gpu-engine/llama-cuda.tar.xz
  mkdir -p "$WORK/engine"
  if [ -f "$ENGINE_TAR" ]; then  # tar's xz, else Python's lzma (an image without xz-utils)
    tar -xJf "$ENGINE_TAR" -C "$WORK/engine" >> "$LOG" 2>&1 \
      || "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$ENGINE_TAR" "$WORK/engine" >> "$LOG" 2>&1
  else
    echo "no $ENGINE_TAR: run make gpu-engine here and carry .gpu-engine (docs/gpu-loop.md)" >> "$LOG"
  fi
  BIN_DIR="$WORK/engine/llama-cuda/bin"
  # the image's CUDA 13 libraries sit in torch's pip packages (nvidia/cu13/lib, or nvidia/<lib>/lib in older layouts)
  CUDA_LIBS=$("$PY" -c "
import glob, os, nvidia
d = sorted({os.path.dirname(p) for b in nvidia.__path__ for p in glob.glob(b + '/**/lib*.so.1[0-9]*', recursive=True)
            if os.path.basename(p).startswith(('libcublas', 'libcudart'))})
print(':'.join(d))" 2>>"$LOG")
  export LD_LIBRARY_PATH="${CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  BIN_DIR=$("$PY" -c "from harness.engines.llama_cpp import find_binary; print(find_binary(None).parent)" 2>>"$LOG")
fi
export HARNESS_LLAMA_CPP_BIN_DIR="$BIN_DIR"
{
  echo "device loop: device $DEVICE, work $WORK, out $OUT_DIR, budget ${BUDGET_S} s, binaries $BIN_DIR"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  ldd --version | head -1
  for b in llama-server llama-batched-bench test-backend-ops test-export-graph-ops; do
    echo "--- ldd $b"; ldd "$BIN_DIR/$b" 2>&1 | grep -E "not found|cuda|cublas|ggml|llama|libc\.so|libstdc" || echo "(missing)"
  done
  "$BIN_DIR/llama-server" --version 2>&1 | tail -3
} >> "$LOG" 2>&1
step prepare 30 "$PY" -m harness.bench.device_loop prepare --work "$WORK" --device "$DEVICE" --bin-dir "$BIN_DIR"
step facts 30 "$PY" -m harness.bench.device_loop facts --work "$WORK"

# ---- 2. the torch suites (the proxy constants), 3. the model, 4. llama.cpp's kernels and step times, 5. the twins
if [ "$SUITES" != none ]; then
  step suites 120 "$PY" -m harness micro run --suite "$SUITES" --quick --out "$WORK/results"
fi
step model 120 "$PY" -m harness.bench.device_loop model --work "$WORK"
step kernels 180 "$PY" -m harness.bench.device_loop kernels --work "$WORK"
step twins 90 "$PY" -m harness.bench.device_loop twins --work "$WORK"

# ---- 6. served load until the deadline (less the reserve), 7. the comparison
DEADLINE=$((START_UNIX + BUDGET_S - RESERVE_S))
step served "$BUDGET_S" "$PY" -m harness.bench.device_loop served --work "$WORK" --deadline-unix-s "$DEADLINE"
step compare 30 "$PY" -m harness.bench.device_loop compare --work "$WORK"

# ---- pack everything but the model and the engine (OUT keeps three files)
tar -czf "$OUT_DIR/run.tar.gz" -C "$WORK" --exclude=./model.gguf --exclude=./engine --exclude='./model.gguf.tmp' . >> "$LOG" 2>&1
collect
echo "done in ${SECONDS} s: $OUT_DIR/checks.json, $OUT_DIR/run.tar.gz, $LOG" | tee -a "$LOG"
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['steps'], indent=1))" "$OUT_DIR/checks.json" 2>/dev/null | tail -40
[ -f "$WORK/comparison.md" ] && cat "$WORK/comparison.md"
exit 0
