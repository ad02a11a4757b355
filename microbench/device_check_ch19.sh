#!/usr/bin/env bash
# The Chapter 19 suites on a lent GPU (H200): precision, mixed_step, cuda_graphs, allocator, offload in
# --quick form, then the report. Usage (from the repository root): microbench/device_check_ch19.sh OUT_DIR
# (about 4 minutes). Writes OUT_DIR/results/<machine>/<run_id>/, OUT_DIR/run.tar.gz (the same, packed),
# OUT_DIR/ch19.log, and OUT_DIR/report/ch19.md when the report's dependencies (pydantic) are present.
# Uses the machine's python3 (torch, pandas, pyarrow); the suites run through the runner directly because
# the full CLI needs pydantic. Reads the card's state only: never changes clocks, power or MIG.
set -uo pipefail
OUT_DIR="${1:?usage: microbench/device_check_ch19.sh OUT_DIR}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$OUT_DIR/nvidia-smi.csv" 2>&1 || true
timeout 420 "$PY" - "$OUT_DIR" <<'PYEOF' 2>&1 | tee "$OUT_DIR/ch19.log"
import sys, time
from pathlib import Path
from harness.report.micro import render_summary
from microbench.runner import run_micro

out = Path(sys.argv[1])
t0 = time.perf_counter()
s = run_micro("precision,mixed_step,cuda_graphs,allocator,offload", quick=True, out=out / "results", device="auto",
              command_line=["microbench/device_check_ch19.sh", str(out)])
print(render_summary(s.to_dict()))
for c in s.cases:
    p = c["params"]
    if c["suite"] == "mixed_step" and p["chunk_tokens"] == 0:
        print(f"mixed_step {c['device']}: hidden prefill tokens per decode step: measured {p['fit_hidden_tokens']:.0f}, "
              f"model {p['model_hidden_tokens']}")
    if c["suite"] == "cuda_graphs" and p.get("mode") == "graph":
        print(f"cuda_graphs {c['device']} b{p['batch']}: capture {p['capture_s'] * 1e3:.1f} ms, saving {p['saving_per_step_s'] * 1e6:.1f} us/step: {p['verdict']}")
    if c["suite"] == "allocator":
        print(f"allocator {c['device']} {p['allocator']}: peak reserved {p['peak_reserved_bytes'] / 2**30:.2f} GiB, "
              f"allocated {p['peak_allocated_bytes'] / 2**30:.2f} GiB, fragmentation at peak {p['fragmentation_at_peak']:.1%}")
    if c["suite"] == "offload" and "predicted_s" in p:
        print(f"offload {c['device']} {p['schedule']}: {c['median_s'] * 1e3:.2f} ms measured, {p['predicted_s'] * 1e3:.2f} ms model")
print(f"ch19 suites took {time.perf_counter() - t0:.0f} s")
PYEOF
tar -czf "$OUT_DIR/run.tar.gz" -C "$OUT_DIR" results 2>/dev/null || true
timeout 60 "$PY" -c "from harness.report.ch19 import render; print(render('$OUT_DIR/results', '$OUT_DIR/report'))" 2>&1 | tail -3 || true
