"""The loop's predict step: the Chapter 9 roofline for the isolated stages, the digital twin for the served points.

Stages (harness.model.stages.stage_rates on a "GPU-like" host spec, peak = C_mm, bandwidth = B_ws,
efficiency 1): prefill tokens/s = P / max(F_P/C_mm, W_P/B_ws); TTFT = that prefill time;
decode tokens/s at batch B = B / max(F_D(B)/C_mm, W_D(B)/B_ws) (Chapter 9, §9.2.3).
Served load: the twin (harness.target.twin) simulates the seeded workload of each point, the very artifact the load
generator then sends (same arrivals and lengths), and its capacity per mix for the capacity burst the loop sends (the
statistic the measurement takes, harness.target.saturation) or a long simulated backlog without one.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

from harness.errors import HarnessError
from harness.loop.calibrate import host_gpu_spec
from harness.loop.output import LoopOutput
from harness.loop.state import LoopState, PlannedPoint
from harness.loop_records.report import MixCapacity
from harness.loop_records.stages import CpuConstants, StagePrediction
from harness.model.stages import Efficiency, Workload, stage_rates
from harness.served import Percentiles, ServedPoint, ServedPrediction
from harness.specs.gguf_model import GgufModel
from harness.target.des import ServedFigures, backlog_rates
from harness.target.stage_requests import StageShape
from harness.target.twin import TwinSpec, capacity, predict_point, requests_from_rows
from workloads.artifact import WorkloadArtifact
from workloads.mixes import single_turn
from workloads.schedule import make_schedule


def predict_stages(gm: GgufModel, c: CpuConstants, shape: StageShape, batches: Sequence[int],
                   kv_bytes_per_elem: float = 2.0) -> list[StagePrediction]:
    """Chapter 9, §9.2.3 roofline with the measured constants (stage_rates on the host spec, efficiency 1)."""
    gpu = host_gpu_spec(c)
    eff = Efficiency(1.0, 1.0, "measured effective constants (efficiency already inside C_mm and B_ws)")
    bpp = gm.streamed_weight_bytes_per_param
    pre = stage_rates(gpu, gm.spec, Workload(shape.prompt_tokens, 2, 0, 1, bpp, kv_bytes_per_elem), eff)
    out = [StagePrediction("prefill_tokens_per_s", pre.prefill_tokens_per_s, pre.prefill_bound, pre.prefill_compute_s,
                           pre.prefill_memory_s, pre.prefill.flops, pre.prefill.bytes, "P / max(F_P / C_mm, W_P / B_ws)"),
           StagePrediction("ttft_s", pre.prefill_s_per_request, pre.prefill_bound, pre.prefill_compute_s,
                           pre.prefill_memory_s, pre.prefill.flops, pre.prefill.bytes, "max(F_P / C_mm, W_P / B_ws)")]
    for bsz in batches:
        st = stage_rates(gpu, gm.spec, Workload(shape.decode_prompt_tokens, shape.output_tokens, 0, bsz, bpp, kv_bytes_per_elem), eff)
        out.append(StagePrediction(f"decode_tokens_per_s@{bsz}", bsz / st.decode_step_s, st.decode_bound, st.decode_step_compute_s,
                                   st.decode_step_memory_s, st.decode_step.flops, st.decode_step.bytes,
                                   f"B / max(F_D / C_mm, W_D / B_ws), B = {bsz}, context L + (G-1)/2 = {st.decode_step.context_tokens:g}"))
    return out


def mix_name(mix: tuple[int, int]) -> str:
    return f"{mix[0]}/{mix[1]}"


def seeded_workload(mix: tuple[int, int], rate: float, duration_s: float, seed: int, point: int) -> WorkloadArtifact:
    """Poisson arrivals at `rate` for `duration_s`, every prompt `mix[0]` tokens and output `mix[1]` (completions API)."""
    sched = make_schedule("poisson", rate_per_s=rate, duration_s=duration_s, seed=seed * 1000 + point)
    if sched.count == 0:
        sched = make_schedule("constant", rate_per_s=max(rate, 1.0 / duration_s), duration_s=duration_s, seed=seed)
    return single_turn(f"loop-{mix[0]}-{mix[1]}", sched, input_tokens=mix[0], output_tokens=mix[1], api="completions",
                       seed=seed * 1000 + point)


def capacity_workload(mix: tuple[int, int], n_requests: int, seed: int) -> WorkloadArtifact:
    """The capacity measurement: `n_requests` requests of one mix, all intended at t = 0 (a backlog that keeps every
    slot busy), prompts seeded apart from the rate points'. The measured figure is harness.target.saturation's (output
    tokens between the 20th and 80th percentile completion, over the mean output); the twin predicts that same
    statistic for these same requests."""
    if isinstance(n_requests, bool) or not isinstance(n_requests, int) or n_requests < 10:
        raise HarnessError(f"--capacity-requests must be an integer >= 10 (the 20th-80th percentile rate needs 10 completions), "
                           f"got {n_requests!r}; give 0 to skip the capacity measurement.")
    sched = make_schedule("trace", timestamps_s=[0.0] * n_requests)
    return single_turn(f"loop-capacity-{mix[0]}-{mix[1]}", sched, input_tokens=mix[0], output_tokens=mix[1], api="completions",
                       seed=seed * 1000 + 999, meta={"capacity_requests": n_requests})


def burst_capacity(twin: TwinSpec, art: WorkloadArtifact, windows: tuple[int, ...] = (0,)) -> MixCapacity:
    """The twin's capacity for a `capacity_workload` artifact, by the estimator the measurement uses, in simulated time."""
    reqs = requests_from_rows(art.rows)
    rps, tok_s = backlog_rates(twin.make_scheduler, reqs)
    return MixCapacity(rps, tok_s, len(reqs), windows)


def twin_capacity(twin: TwinSpec, mix: tuple[int, int], burst: WorkloadArtifact | None) -> MixCapacity:
    """The twin's capacity for a mix: for its burst artifact, else a long simulated backlog (max(40, 12 × slots))."""
    if burst is not None:
        return burst_capacity(twin, burst)
    rps, tok = capacity(twin.make_scheduler, mix[0], mix[1], slots=twin.slots)
    return MixCapacity(rps, tok)


def served_prediction(point: ServedPoint, fig: ServedFigures | None, capacity_rps: float | None, source: str) -> ServedPrediction:
    """The twin's figures (harness.target.des.ServedFigures) as the shared record."""
    if fig is None:
        return ServedPrediction(point, source, capacity_requests_per_s=capacity_rps)
    n = int(fig.requests_measured)
    return ServedPrediction(point, source, ttft_s=Percentiles(n, p50=fig.ttft_p50_s, p90=fig.ttft_p90_s),
                            tpot_s=Percentiles(n, p50=fig.tpot_p50_s), e2e_s=Percentiles(n, p50=fig.e2e_p50_s),
                            request_throughput_per_s=fig.request_throughput_per_s, output_tokens_per_s=fig.output_tokens_per_s,
                            capacity_requests_per_s=capacity_rps)


def twin_source(twin: TwinSpec) -> str:
    return f"{twin.engine} twin (simulated; step times: {twin.source})"


def predict(twin: TwinSpec, p: PlannedPoint, duration_s: float, *, art: WorkloadArtifact | None = None,
            capacity_rps: float | None = None, windows: tuple[int, ...] | None = None) -> PlannedPoint:
    """`p` predicted again by `twin` (for `art`, the workload as sent, when given): a rate point's figures over its
    span, a burst's capacity statistic for its requests."""
    art = art or p.artifact
    t0 = time.perf_counter()
    if p.burst:
        cap = burst_capacity(twin, art).requests_per_s
        pred = served_prediction(p.point, None, cap, twin_source(twin))
    else:
        fig = predict_point(twin.make_scheduler, requests_from_rows(art.rows), rate_per_s=float(p.point.rate_per_s or 0.0),
                            span_s=duration_s)
        cap = p.prediction.capacity_requests_per_s if capacity_rps is None else capacity_rps
        pred = served_prediction(p.point, fig, cap, twin_source(twin))
    return PlannedPoint(p.point, p.fraction, art, pred, time.perf_counter() - t0, p.windows if windows is None else windows)


def plan_points(twin: TwinSpec, mixes: Sequence[tuple[int, int]], rate_fractions: Sequence[float], duration_s: float,
                seed: int, burst_requests: int) -> tuple[dict[str, MixCapacity], list[PlannedPoint]]:
    """The twin's capacity per mix and its prediction of every point: per mix each rate (a fraction of that capacity),
    then each mix's capacity burst of `burst_requests` (none at 0). The artifacts are what the measurement sends, so
    the prediction and the measurement see the same arrivals and lengths."""
    bursts = {mix_name(m): capacity_workload(m, burst_requests, seed) for m in mixes} if burst_requests else {}
    caps = {mix_name(m): twin_capacity(twin, m, bursts.get(mix_name(m))) for m in mixes}
    points: list[PlannedPoint] = []
    for m in mixes:
        cap = caps[mix_name(m)].requests_per_s
        for f in rate_fractions:
            idx = len(points)
            pt = ServedPoint(m[0], m[1], rate_per_s=f * cap, workload=mix_name(m), index=idx)
            art = seeded_workload(m, f * cap, duration_s, seed, idx)
            points.append(predict(twin, PlannedPoint(pt, f, art, served_prediction(pt, None, cap, ""), 0.0), duration_s))
    for m in mixes:
        art = bursts.get(mix_name(m))
        if art is not None:
            pt = ServedPoint(m[0], m[1], rate_per_s=math.inf, workload=mix_name(m), index=len(points))
            pred = served_prediction(pt, None, caps[mix_name(m)].requests_per_s, twin_source(twin))
            points.append(PlannedPoint(pt, math.inf, art, pred, 0.0))
    return caps, points


def predict_served(state: LoopState, out: LoopOutput, say: Callable[[str], None], revision: int) -> None:
    """The twin's capacity per mix and its prediction of every point of the plan into the state (and loop_prediction)."""
    p = state.plan
    state.capacity, state.points = plan_points(state.twin, p.mixes, p.rate_fractions, p.point_duration_s, p.seed,  # type: ignore[arg-type]
                                               p.capacity_requests)
    for name, c in state.capacity.items():
        say(f"twin: {name} capacity {c.requests_per_s:.3f} req/s ({c.output_tokens_per_s:.1f} output tokens/s), simulated")
    out.predictions(state.points, revision=revision)


__all__ = ["burst_capacity", "capacity_workload", "plan_points", "predict", "predict_served", "predict_stages", "seeded_workload",
           "twin_capacity"]
