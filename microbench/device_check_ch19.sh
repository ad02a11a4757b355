#!/usr/bin/env bash
# The Chapter 19 suites (precision, mixed_step, cuda_graphs, allocator, offload) in --quick form on a lent GPU,
# within the same limits as microbench/device_check.sh (which this runs): work under /tmp, OUT_DIR receives
# only checks.json, run.tar.gz and device_check.log; at most 6 minutes. Usage: microbench/device_check_ch19.sh OUT_DIR
# Render the report after `harness micro import-device OUT_DIR/run.tar.gz` with `harness report results/<machine>/<run_id>/`.
set -uo pipefail
export SUITES="${SUITES:-precision,mixed_step,cuda_graphs,allocator,offload}" CHECKS="${CHECKS:-none}"
exec "$(dirname "$0")/device_check.sh" "$@"
