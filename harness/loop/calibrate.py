"""Step 1 of the CPU loop: calibrate host constants with the microbenchmarks' timing core (engine stopped).

- matmul throughput C_mm at the model's own prefill shapes (qkv, o, gate_up, down at P tokens;
  torch fp32 on the engine's thread count): C_mm = Σ 2·M·N·K / Σ median time;
- host read bandwidth B_ws over a buffer the size of the weights one decode step streams (the
  working set the engine really re-reads), and B_dram over 4× the last-level cache, for reference.

`step_times` turns the constants into the twin's StepTimes source (the roofline with C_mm, B_ws).
"""

from __future__ import annotations

import time
from typing import Any

from harness.errors import HarnessError
from harness.loop_records.stages import CpuConstants
from harness.specs.gguf_model import GgufModel
from harness.specs.gpus import GpuSpec
from harness.specs.host import detect_host
from harness.target.step_times import RooflineStepTimes
from microbench.backends import detect_backends
from microbench.gemm import gemm_work, matmul_thunk, projections
from microbench.timing import FULL, QUICK


def _read_thunk(torch: Any, nbytes: float) -> tuple[Any, float]:
    n = max(1, int(nbytes // 4))
    buf = torch.ones(n, dtype=torch.float32)
    return (lambda: buf.sum()), n * 4.0


def calibrate_cpu(gm: GgufModel, *, prompt_tokens: int, threads: int, quick: bool = False, dram: bool = True) -> CpuConstants:
    """Measure C_mm at the model's shapes and B_ws / B_dram with microbench's timing core."""
    try:
        import torch  # noqa: PLC0415 - torch takes seconds to import; only the calibration needs it
    except ImportError:
        raise HarnessError("the CPU loop calibrates with torch; pip install -e '.[torch]' (torch==2.13.0, CPU wheel).") from None

    policy = QUICK if quick else FULL
    det = detect_backends(detect_host(), device="cpu", want=("torch",))
    b = next((x for x in det.backends if x.name == "torch"), None)
    if b is None:
        raise HarnessError("no torch CPU backend for the calibration: " + "; ".join(r for _, r in det.missing))
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        by_shape: dict[str, dict[str, float]] = {}
        tot_flops = tot_s = 0.0
        for name, (k, n) in projections(gm.spec).items():
            fn = matmul_thunk(b, prompt_tokens, n, k, "fp32", 1, 0)
            m = b.time(fn, policy)
            flops = gemm_work(prompt_tokens, n, k, 4.0).useful_flops
            by_shape[name] = {"m": prompt_tokens, "n": n, "k": k, "flops": flops, "median_s": m.stats.median_s,
                              "flops_per_s": flops / m.stats.median_s, "cv": m.stats.cv}
            tot_flops += flops * gm.spec.n_layers
            tot_s += m.stats.median_s * gm.spec.n_layers
        ws = float(gm.streamed_weight_bytes)
        fn, nbytes = _read_thunk(torch, ws)
        m = b.time(fn, policy)
        b_ws = nbytes / m.stats.median_s
        b_dram = dram_bytes = None
        if dram and b.cache_bytes:
            dram_bytes = 4.0 * b.cache_bytes if not quick else max(2.0 * b.cache_bytes, ws)
            fn, dram_bytes = _read_thunk(torch, dram_bytes)
            m2 = b.time(fn, QUICK)
            b_dram = dram_bytes / m2.stats.median_s
            del fn
    finally:
        torch.set_num_threads(old_threads)
    wall = time.perf_counter() - wall0
    share = (time.process_time() - cpu0) / (wall * threads) if wall > 0 else None
    return CpuConstants(
        threads=threads, matmul_flops_per_s=tot_flops / tot_s, matmul_by_shape=by_shape,
        read_bandwidth_bytes_per_s=b_ws, working_set_bytes=nbytes, dram_bandwidth_bytes_per_s=b_dram,
        dram_buffer_bytes=dram_bytes, llc_bytes=b.cache_bytes, torch_version=torch.__version__, cpu_share=share,
        source=(f"microbench.gemm matmul_thunk (torch fp32, {threads} threads) at {gm.spec.name}'s projections × "
                f"{prompt_tokens} tokens; read bandwidth: torch sum over {nbytes / 2**20:.0f} MiB fp32 "
                f"(the decode working set); timing core microbench.timing ({'QUICK' if quick else 'FULL'} policy)"),
    )


def host_gpu_spec(c: CpuConstants, capacity_bytes: float = 1e12) -> GpuSpec:
    """The host as a "GPU-like" spec for harness.model: peak = C_mm, bandwidth = B_ws (effective values)."""
    return GpuSpec(
        name=f"host-cpu-{c.threads}t", peak_bf16_flops_per_s=c.matmul_flops_per_s,
        hbm_bandwidth_bytes_per_s=c.read_bandwidth_bytes_per_s, hbm_capacity_bytes=capacity_bytes,
        source=f"measured: {c.source}",
    )


def step_times(gm: GgufModel, c: CpuConstants, kv_bytes_per_elem: float = 2.0) -> RooflineStepTimes:
    """The twin's step times from the calibrated constants: max(F/C_mm, W/B_ws) (Chapter 9, §9.2.3)."""
    return RooflineStepTimes(gm.spec, c.matmul_flops_per_s, c.read_bandwidth_bytes_per_s, gm.streamed_weight_bytes_per_param,
                             kv_bytes_per_elem, source=f"roofline with C_mm = {c.matmul_flops_per_s / 1e9:.1f} GFLOP/s, "
                                                       f"B_ws = {c.read_bandwidth_bytes_per_s / 1e9:.1f} GB/s ({c.source})")
