"""Step 2 of the CPU loop: predict with the Chapter 9 roofline (isolated stages) and with the digital twin (served load).

Stages (harness.model.stages.stage_rates on a "GPU-like" host spec, peak = C_mm, bandwidth = B_ws,
efficiency 1): prefill tokens/s = P / max(F_P/C_mm, W_P/B_ws); TTFT = that prefill time;
decode tokens/s at batch B = B / max(F_D(B)/C_mm, W_D(B)/B_ws) (Chapter 9, §9.2.3).
Served load: the twin (harness.target.twin) simulates the seeded workload at each arrival rate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
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




def served_predictions(twin: Any, mixes: tuple[tuple[int, int], ...], rate_fractions: tuple[float, ...], duration_s: float,
                       seed: int, bursts: dict[str, Any] | None = None
                       ) -> tuple[dict[str, dict[str, float]], list[Any], list[tuple[int, tuple[int, int], float, float, Any]]]:
    """The twin's capacity per mix and its prediction at every (mix, rate) point of the seeded workloads.

    Returns (capacity by mix, ServedPoint list, work list of (point, mix, fraction, rate, artifact)) — the artifacts
    are what the measurement then sends, so the prediction and the measurement see the same arrivals and lengths.
    The capacity is `twin_capacity`'s: for the mix's burst artifact in `bursts` (by mix name) when there is one."""
    from harness.loop.report import ServedPoint  # noqa: PLC0415
    from harness.target.twin import predict_point, requests_from_rows  # noqa: PLC0415

    caps = twin_capacity(twin, mixes, bursts or {})
    points: list[Any] = []
    work: list[tuple[int, tuple[int, int], float, float, Any]] = []
    for mix in mixes:
        name = f"{mix[0]}/{mix[1]}"
        cap_rps = caps[name]["requests_per_s"]
        for f in rate_fractions:
            pt = len(work)
            art = seeded_workload(mix, f * cap_rps, duration_s, seed, pt)
            t0 = time.perf_counter()
            fig = predict_point(twin.make_scheduler, requests_from_rows(art.rows), rate_per_s=f * cap_rps, span_s=duration_s)
            points.append(ServedPoint(name, pt, mix[0], mix[1], f * cap_rps, f, art.count, fig.to_dict(), None, time.perf_counter() - t0))
            work.append((pt, mix, f, f * cap_rps, art))
    return caps, points, work


def twin_capacity(twin: Any, mixes: tuple[tuple[int, int], ...], bursts: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The twin's capacity per mix: for the mix's burst artifact (`capacity_workload`, by mix name) the statistic the
    loop then measures on it, otherwise a long simulated backlog (max(40, 12 × slots) requests)."""
    from harness.target.twin import capacity  # noqa: PLC0415

    out: dict[str, dict[str, float]] = {}
    for m in mixes:
        name = f"{m[0]}/{m[1]}"
        if name in bursts:
            out[name] = burst_capacity(twin, bursts[name])
        else:
            rps, tok = capacity(twin.make_scheduler, m[0], m[1], slots=twin.slots)
            out[name] = {"requests_per_s": rps, "output_tokens_per_s": tok}
    return out


def capacity_workload(mix: tuple[int, int], n_requests: int, seed: int) -> Any:
    """The capacity measurement: `n_requests` requests of one mix, all intended at t = 0 (a backlog that keeps every
    slot busy), prompts seeded apart from the rate points'. The measured figure is harness.target.saturation's (output
    tokens between the 20th and 80th percentile completion, over the mean output); the twin predicts that same
    statistic for these same requests."""
    from workloads.mixes import single_turn  # noqa: PLC0415
    from workloads.schedule import make_schedule  # noqa: PLC0415

    if isinstance(n_requests, bool) or not isinstance(n_requests, int) or n_requests < 10:
        raise HarnessError(f"--capacity-requests must be an integer >= 10 (the 20th-80th percentile rate needs 10 completions), "
                           f"got {n_requests!r}; give 0 to skip the capacity measurement.")
    sched = make_schedule("trace", timestamps_s=[0.0] * n_requests)
    return single_turn(f"loop-capacity-{mix[0]}-{mix[1]}", sched, input_tokens=mix[0], output_tokens=mix[1], api="completions",
                       seed=seed * 1000 + 999, meta={"capacity_requests": n_requests})


def burst_capacity(twin: Any, art: Any) -> dict[str, float]:
    """The twin's capacity for a `capacity_workload` artifact, by the estimator the measurement uses
    (harness.target.saturation: output tokens between the 20th and 80th percentile completion), in simulated time."""
    from harness.target.des import backlog_rates  # noqa: PLC0415
    from harness.target.twin import requests_from_rows  # noqa: PLC0415

    reqs = requests_from_rows(art.rows)
    rps, tok_s = backlog_rates(twin.make_scheduler, reqs)
    return {"requests_per_s": rps, "output_tokens_per_s": tok_s, "burst_requests": float(len(reqs))}


def seeded_workload(mix: tuple[int, int], rate: float, duration_s: float, seed: int, point: int) -> Any:
    """Poisson arrivals at `rate` for `duration_s`, every prompt `mix[0]` tokens and output `mix[1]` (completions API)."""
    from workloads.mixes import single_turn  # noqa: PLC0415
    from workloads.schedule import make_schedule  # noqa: PLC0415

    sched = make_schedule("poisson", rate_per_s=rate, duration_s=duration_s, seed=seed * 1000 + point)
    if sched.count == 0:
        sched = make_schedule("constant", rate_per_s=max(rate, 1.0 / duration_s), duration_s=duration_s, seed=seed)
    return single_turn(f"loop-{mix[0]}-{mix[1]}", sched, input_tokens=mix[0], output_tokens=mix[1], api="completions",
                       seed=seed * 1000 + point)
