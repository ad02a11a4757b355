"""`harness predict`: the served TTFT / TPOT of a GPU deployment, from the engine's twin run in simulated time.

The steps, top to bottom: resolve the model, precision and constants (harness.predict.calibration); build each
role's instance twin — the engine's scheduler with its defaults, the step model of its cards, the KV room that caps
its batch (harness.predict.engines); put the instances behind a router or into a prefill → KV link → decode chain
(harness.target.disagg); run the workload as the benchmark runs it (harness.predict.simulate); summarise.
Chapter mode (`predict_chapter`) runs a scenario's chapter deployment (harness.target.chapter) instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.model.kv import kv_bytes_per_token
from harness.model.precision import Precision, get_precision
from harness.predict.calibration import StepConstants, step_constants
from harness.predict.deployment import Deployment, Workers, Workload
from harness.predict.engines import InstanceTwin, build_instance
from harness.predict.point import KvFigures, PredictedPoint
from harness.predict.simulate import RunResult, run
from harness.served import Percentiles
from harness.specs.gpus import get_gpu
from harness.specs.links import get_link
from harness.specs.models import ModelSpec, get_model
from harness.target.chunked_prefill import ChunkedPrefillScheduler
from harness.target.disagg import Disaggregated, Replicas, role_scheduler
from harness.target.trtllm import TrtllmScheduler, TrtllmSettings


def predict(d: Deployment, w: Workload, *, calibration: str = "auto", kernel_data: str | None = None,
            constants: StepConstants | None = None) -> PredictedPoint:
    """Predict one served point; `constants` (already resolved) skips the `calibration` lookup."""
    model = d.model_spec
    prec = _precision_on(d, model)
    consts = constants or step_constants(calibration, d.gpu, d.engine, kernel_data=kernel_data)
    notes: list[str] = []
    if d.mode == "agg":
        twin = _instance(d, "agg", d.workers, model, prec, consts)
        _fits(twin, w, "agg")
        n = d.workers.count

        def make_cluster() -> Any:
            return Replicas([twin.make_scheduler() for _ in range(n)])

        layout = f"{n} × {d.workers.parallel.describe()}"
        kv_twin, notes = twin, list(twin.notes)
    else:
        assert d.prefill is not None and d.decode is not None
        p_twin = _instance(d, "prefill", d.prefill, model, prec, consts)
        d_twin = _instance(d, "decode", d.decode, model, prec, consts)
        _fits(d_twin, w, "decode")
        link = get_link(d.kv_link)
        tp_p = d.prefill.parallel.tp
        per_tok = kv_bytes_per_token(model, d.kv_bytes_per_elem)
        p_cls, d_cls = _role_classes(p_twin), _role_classes(d_twin)
        n_p, n_d = d.prefill.count, d.decode.count

        def make_cluster() -> Any:
            return Disaggregated([p_cls[0](p_twin.settings, p_twin.step_model) for _ in range(n_p)],
                                 [d_cls[1](d_twin.settings, d_twin.step_model) for _ in range(n_d)],
                                 lambda r: r.input_tokens * per_tok, tp_p * link.bandwidth_bytes_per_s, link.startup_latency_s)

        layout = (f"P {n_p} × {d.prefill.parallel.describe()} (batch {p_twin.max_running}) + "
                  f"D {n_d} × {d.decode.parallel.describe()} (batch {d_twin.max_running})")
        kv_twin = d_twin
        notes = [f"prefill: {x}" for x in p_twin.notes] + [f"decode: {x}" for x in d_twin.notes]
        notes.append(f"KV hand-off over {link.name}: {link.bandwidth_bytes_per_s / 1e9:g} GB/s per card × {tp_p} cards of a "
                     f"prefill instance, α {link.startup_latency_s * 1e6:g} µs; the first token streams when the state has arrived")
    res = run(make_cluster, w)
    if d.engine in OVERLAP_SCHEDULING:
        res = _with_output_lag(res)
        notes.append(f"{d.engine}'s overlap scheduler hands each step's tokens out after the next step is launched: every "
                     "token reaches the client one step later (TTFT and E2E + one decode step, TPOT unchanged)")
    return _point(d, w, model, layout, res, kv_twin, consts.describe(), consts.kind, notes, d.gpus)


# engines whose default scheduler overlaps the CPU work of step k+1 with the GPU work of step k, so the tokens of step k
# are processed (and streamed) when step k+1 is already running: SGLang's overlap scheduler (on unless
# --disable-overlap-schedule), TensorRT-LLM's PyTorch executor (disable_overlap_scheduler false). vLLM's V1 engine does
# not by default (async scheduling is opt-in).
OVERLAP_SCHEDULING = ("sglang", "trtllm")


def _with_output_lag(res: RunResult) -> RunResult:
    """Every token one step later: TTFT and E2E grow by the request's own mean step (its TPOT, or the run's median TPOT
    for one-token requests); TPOT is unchanged."""
    step = np.where(np.isfinite(res.tpot_s), res.tpot_s, np.nanmedian(res.tpot_s) if np.isfinite(res.tpot_s).any() else 0.0)
    return dataclasses.replace(res, ttft_s=res.ttft_s + step, e2e_s=res.e2e_s + step)


def _precision_on(d: Deployment, model: ModelSpec) -> Precision:
    prec = get_precision(d.precision)
    gpu = get_gpu(d.gpu)
    if gpu.peak_flops_per_s(prec.gemm_dtype) is None:
        raise HarnessError(f"precision = {d.precision!r}: {gpu.name} has no {prec.gemm_dtype.upper()} tensor cores in its "
                           "datasheet (FP8 needs Hopper or newer); give --precision bf16.")
    if prec.weight_only_experts and not model.is_moe:
        raise HarnessError(f"precision = {d.precision!r} quantizes routed experts only, and {model.name} is a dense model; "
                           "give --precision bf16 or fp8.")
    return prec


def _instance(d: Deployment, role: str, workers: Workers, model: ModelSpec, prec: Precision, consts: StepConstants) -> InstanceTwin:
    try:
        return build_instance(d.engine, role, model, d.gpu, workers.parallel, prec, d.kv_bytes_per_elem, consts,
                              max_batch=workers.max_batch, max_num_tokens=d.max_num_tokens, chunked_prefill=d.chunked_prefill)
    except HarnessError as exc:
        where = {"agg": "--tp", "prefill": "--prefill-tp", "decode": "--decode-tp"}[role]
        raise HarnessError(f"{role} workers ({where} {workers.parallel.tp}): {exc}") from None


def _role_classes(twin: InstanceTwin) -> tuple[type, type]:
    base = TrtllmScheduler if isinstance(twin.settings, TrtllmSettings) else ChunkedPrefillScheduler
    return role_scheduler(base, "prefill"), role_scheduler(base, "decode")


def _fits(twin: InstanceTwin, w: Workload, role: str) -> None:
    need = w.max_input_tokens + w.max_output_tokens
    cap = twin.kv_capacity_tokens
    if cap is not None and need > cap:
        raise HarnessError(f"one request of {need:,} tokens (input + output) does not fit the KV cache of one {role} instance "
                           f"({cap:,.0f} tokens: {twin.memory.describe() if twin.memory else ''}); give a larger tp or "
                           "shorter requests.")


def _instances(cluster: Any) -> list[Any]:
    if isinstance(cluster, Disaggregated):
        return cluster.decode
    if isinstance(cluster, Replicas):
        return cluster.instances
    return [cluster]


def _point(d: Deployment, w: Workload, model: ModelSpec, layout: str, res: RunResult, kv_twin: InstanceTwin | None,
           calibration: str, kind: str, notes: list[str], gpus: int) -> PredictedPoint:
    kv = None
    if kv_twin is not None and kv_twin.memory is not None:
        inst = _instances(res.cluster)
        tokens = kv_twin.memory.kv_tokens
        pre = sum(getattr(i, "preemptions", 0) for i in inst)
        held = sum(getattr(i, "kv_limited_steps", 0) for i in inst)
        kv = KvFigures(tokens, int(tokens // (w.input_tokens + w.output_tokens)), kv_twin.max_running,
                       max(getattr(i, "peak_running", 0) for i in inst), bool(pre or held), pre, kv_twin.memory.describe())
        if kv.capped:
            notes = notes + [f"KV memory caps the batch: {kv.batch_limit} whole requests fit one instance's cache; requests "
                             f"were held back {held} times and preempted {pre} times"]
    span = res.span_s
    done = np.isfinite(res.e2e_s)
    req_rate = float(done.sum()) / span if span > 0 else 0.0
    tok_rate = float(res.output_tokens[done].sum()) / span if span > 0 else 0.0
    return PredictedPoint(
        engine=d.engine, gpu=d.gpu, model=model.name, precision=d.precision, kv_dtype=d.kv_dtype, mode=d.mode,
        layout=layout, gpus=gpus, workload=w.describe(),
        ttft_s=Percentiles.from_values(res.ttft_s), tpot_s=Percentiles.from_values(res.tpot_s),
        e2e_s=Percentiles.from_values(res.e2e_s), request_throughput_per_s=req_rate, output_tokens_per_s=tok_rate,
        request_throughput_per_gpu_s=req_rate / gpus, output_tokens_per_gpu_s=tok_rate / gpus, kv=kv,
        calibration=calibration, calibration_kind=kind, rejected=res.rejected, notes=tuple(notes),
        compute_s=res.compute_s, events=res.events)


def predict_chapter(scenario_path: str, w: Workload, *, allocation: str = "best", mode: str | None = None) -> PredictedPoint:
    """Chapter mode: the scenario's deployment as the chapter models it (FIFO pools, unchunked prefill, the shared
    KV link, batched decode at the roofline with the scenario's efficiency; harness.target.chapter), under `w`."""
    from harness.specs.scenario import load_scenario  # noqa: PLC0415
    from harness.target.chapter import ChapterScheduler  # noqa: PLC0415
    from harness.target.deployment import deployment_from_scenario  # noqa: PLC0415

    s = load_scenario(scenario_path)
    dep = deployment_from_scenario(s, allocation=allocation, mode=mode, startup_s=0.0)  # type: ignore[arg-type]
    res = run(lambda: ChapterScheduler(dep), w)
    gpus = len(dep.prefill_gpus) + len(dep.decode_gpus) + len(dep.colocated_gpus)
    if dep.mode == "pd":
        layout = f"PD: P {', '.join(dep.prefill_gpus)}; D {', '.join(dep.decode_gpus)} (decode batch {dep.decode_batch})"
    else:
        layout = f"colocated: {', '.join(dep.colocated_gpus)} (batch {dep.decode_batch})"
    fake = Deployment("vllm", dep.colocated_gpus[0] if dep.colocated_gpus else dep.prefill_gpus[0], s.workload.model)
    p = _point(fake, w, get_model(s.workload.model), layout, res, None,
               f"chapter mode: datasheet peaks × the scenario's efficiency (Chapter 9, §9.2.3), scenario {s.name}", "chapter",
               [f"chapter mode ({s.source}): the scenario's deployment, allocation {dep.allocation}"], gpus)
    return dataclasses.replace(p, engine="chapter", mode="chapter", precision=s.workload.weight_dtype, kv_dtype=s.workload.kv_dtype,
                    gpu="+".join(sorted(set(dep.prefill_gpus + dep.decode_gpus + dep.colocated_gpus))))
