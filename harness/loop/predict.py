"""Step 2 of the CPU loop: predict with the Chapter 9 roofline (isolated stages) and with the digital twin (served load).

Stages (harness.model.stages.stage_rates on a "GPU-like" host spec, peak = C_mm, bandwidth = B_ws,
efficiency 1): prefill tokens/s = P / max(F_P/C_mm, W_P/B_ws); TTFT = that prefill time;
decode tokens/s at batch B = B / max(F_D(B)/C_mm, W_D(B)/B_ws) (Chapter 9, §9.2.3).
Served load: the twin (harness.target.twin) simulates the seeded workload at each arrival rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.loop.calibrate import CpuConstants, host_gpu_spec
from harness.specs.gguf_model import GgufModel

DEFAULT_BATCHES = (1, 2, 4)


@dataclass(frozen=True)
class Predicted:
    quantity: str  # "prefill_tokens_per_s", "ttft_s", "decode_tokens_per_s@B"
    value: float
    bound: str  # compute | memory
    compute_s: float  # the compute term of the roofline for the unit of work
    memory_s: float
    flops: float
    bytes: float
    formula: str


def predict(gm: GgufModel, c: CpuConstants, *, prompt_tokens: int, decode_prompt_tokens: int, output_tokens: int,
            batches: tuple[int, ...] = DEFAULT_BATCHES, kv_bytes_per_elem: float = 2.0) -> list[Predicted]:
    """Chapter 9, §9.2.3 roofline with the measured constants (stage_rates on the host spec, efficiency 1)."""
    from harness.model.stages import Efficiency, Workload, stage_rates  # noqa: PLC0415

    gpu = host_gpu_spec(c)
    eff = Efficiency(1.0, 1.0, "measured effective constants (efficiency already inside C_mm and B_ws)")
    bpp = gm.streamed_weight_bytes_per_param
    out: list[Predicted] = []
    pre = stage_rates(gpu, gm.spec, Workload(prompt_tokens, 2, 0, 1, bpp, kv_bytes_per_elem), eff)
    out.append(Predicted("prefill_tokens_per_s", pre.prefill_tokens_per_s, pre.prefill_bound, pre.prefill_compute_s,
                         pre.prefill_memory_s, pre.prefill.flops, pre.prefill.bytes,
                         "P / max(F_P / C_mm, W_P / B_ws)"))
    out.append(Predicted("ttft_s", pre.prefill_s_per_request, pre.prefill_bound, pre.prefill_compute_s,
                         pre.prefill_memory_s, pre.prefill.flops, pre.prefill.bytes, "max(F_P / C_mm, W_P / B_ws)"))
    for bsz in batches:
        st = stage_rates(gpu, gm.spec, Workload(decode_prompt_tokens, output_tokens, 0, bsz, bpp, kv_bytes_per_elem), eff)
        out.append(Predicted(f"decode_tokens_per_s@{bsz}", bsz / st.decode_step_s, st.decode_bound, st.decode_step_compute_s,
                             st.decode_step_memory_s, st.decode_step.flops, st.decode_step.bytes,
                             f"B / max(F_D / C_mm, W_D / B_ws), B = {bsz}, context L + (G-1)/2 = {st.decode_step.context_tokens:g}"))
    return out


