"""Compatibility shim: the CPU loop now lives in harness.loop (one module per step; issue 14.6)."""

from harness.loop.calibrate import CpuConstants, calibrate_cpu, host_gpu_spec, step_times  # noqa: F401
from harness.loop.compare import Comparison, compare, verdict  # noqa: F401
from harness.loop.measure import CpuShare, Measured, RequestCheck, measure_decode, measure_prefill, process_cpu_s, token_prompt  # noqa: F401
from harness.loop.predict import DEFAULT_BATCHES, Predicted, predict  # noqa: F401
from harness.loop.render import render_markdown  # noqa: F401
from harness.loop.report import LoopReport  # noqa: F401
from harness.loop.run import LoopOptions, run_loop  # noqa: F401
