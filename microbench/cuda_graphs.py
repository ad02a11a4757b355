"""cuda_graphs suite: capture time of a decode step vs the time it saves per step, and the §9.6.1 break-even.

Chapter 9, §9.6.1: graph preparation adds T_s to startup and saves δ per batch execution; the net
gain after N steps is N·δ − T_s, break-even at N = T_s/δ (10 s / 0.2 ms = 50 000 steps ≈ 1.6 M
tokens at batch 32). Chapter 19, §19.10: a pool of pre-captured graphs, one per batch size.

GPU (the real thing): the random-weight decoder's decode step with static inputs is timed eagerly
(plain launches) and replayed from a torch.cuda.CUDAGraph; T_s is the wall time of the side-stream
warm-up plus the capture, repeated; δ = eager − replay. CPU (a stand-in, labelled as one): the same
step traced with torch.jit.trace (the op graph is recorded once and run without per-op Python
dispatch), T_s the trace time. Both record an `eager` and a `graph` case per batch, with the
capture samples, δ and harness.model.lifecycle.graph_capture_break_even on the graph case; δ ≤ 0
is reported as "no saving" with no break-even.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Iterator

from harness.model.forward import decode_step_work
from harness.model.lifecycle import graph_capture_break_even
from harness.specs.models import ModelSpec, get_model
from harness.units import dtype_bytes
from microbench.backends import Backend
from microbench.case import CaseResult, Skip, Work
from microbench.suite import Item, Planned, SuiteContext
from microbench.timing import capture_graph, measurement_from_samples
from microbench.transformer import TINY, RandomDecoder

NAME = "cuda_graphs"
DESCRIPTION = "decode step eager vs CUDA-graph replay: capture time T_s, saving per step δ, break-even T_s/δ (§9.6.1, §19.10; CPU: TorchScript stand-in)"

CAPTURES = 3  # capture repetitions (each a fresh graph)


def static_step(d: RandomDecoder, ids: Any, pos: Any, batch: int, context: int) -> Any:
    """A decode step whose inputs are given tensors (no host→device copy inside, so it can be captured)."""
    return d.step(ids, pos, batch, context)


def capture_cuda(torch: Any, fn: Callable[[], Any]) -> tuple[Any, float]:
    """Side-stream warm-up then capture into a new CUDAGraph; returns (graph, wall seconds)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g = capture_graph(torch, fn)
    torch.cuda.synchronize()
    return g, time.perf_counter() - t0


def capture_cpu(torch: Any, fn: Callable[..., Any], ids: Any, pos: Any) -> tuple[Any, float]:
    """torch.jit.trace of the step plus three warm-up runs (TorchScript optimises on the first runs); wall seconds."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trace is deprecated in favour of torch.compile, which needs a C++ toolchain here
        g = torch.jit.trace(fn, (ids, pos), check_trace=False)
    for _ in range(3):
        g(ids, pos)
    return g, time.perf_counter() - t0


def run_batch(ctx: SuiteContext, b: Backend, m: ModelSpec, dtype: str, batch: int, context: int, holder: dict) -> list[CaseResult]:
    t = b.module
    if "d" not in holder:
        holder["d"] = RandomDecoder(m, t, b.device, b.dtype_of(dtype), holder["max_batch"], context, ctx.seed)
    d = holder["d"]
    eb = dtype_bytes(dtype)
    w = decode_step_work(m, batch, context, eb, eb)
    work = Work(w.flops, w.bytes)
    ids, pos = d.inputs("decode", batch, context)
    captures: list[float] = []
    with t.inference_mode():
        eager = b.time(lambda: static_step(d, ids, pos, batch, context), ctx.policy, allow_graph=False)
        if b.is_cuda:
            mechanism = "torch.cuda.CUDAGraph capture and replay"
            g = None
            for _ in range(CAPTURES):
                g, s = capture_cuda(t, lambda: static_step(d, ids, pos, batch, context))
                captures.append(s)
            graph = b.time(g.replay, ctx.policy, allow_graph=False)
        else:
            mechanism = "torch.jit.trace (CPU stand-in for graph capture: removes per-op Python dispatch, not kernel launches)"
            g = None
            for _ in range(CAPTURES):
                g, s = capture_cpu(t, lambda i, p: static_step(d, i, p, batch, context), ids, pos)
                captures.append(s)
            graph = b.time(lambda: g(ids, pos), ctx.policy)
    cap = measurement_from_samples(captures, 1, "perf_counter_ns", ctx.policy)
    delta = eager.stats.median_s - graph.stats.median_s
    be = graph_capture_break_even(cap.stats.median_s, delta, batch).to_dict() if delta > 0 else None
    base = {"model": m.name, "batch": batch, "context_tokens": context, "mechanism": mechanism}
    params = {**base, "capture_s": cap.stats.median_s, "capture_samples_s": list(captures), "eager_step_s": eager.stats.median_s,
              "graph_step_s": graph.stats.median_s, "saving_per_step_s": delta, "break_even": be,
              "verdict": "no saving: the captured step is not faster here, so capture never pays back" if be is None else
              f"break-even after {be['break_even_steps']:.0f} steps ({be['break_even_tokens']:.0f} tokens at batch {batch})"}
    case = f"{m.name}-b{batch}-c{context}"
    return [
        ctx.result(NAME, f"{case}-eager", b, dtype, {**base, "mode": "eager"}, work, eager),
        ctx.result(NAME, f"{case}-graph", b, dtype, {**params, "mode": "graph"}, work, graph,
                   notes=(f"capture {cap.stats.median_s * 1e3:.1f} ms (median of {CAPTURES}); {params['verdict']}",)),
    ]


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, b.label, "graph capture is a torch feature; numpy has nothing to capture")
            continue
        if b.is_cuda:
            m, dtype, context = get_model(ctx.options.get("model", "qwen3-8b")), "bf16", (2048 if ctx.quick else 4096)
            batches = [1, 32] if ctx.quick else [1, 8, 32, 64]
        else:
            m, dtype, context = TINY, "fp32", 128
            batches = [1] if ctx.quick else [1, 8]
            yield Skip(NAME, f"{b.label}-cuda-graph", "CUDA graphs need a GPU; this CPU run measures the TorchScript stand-in instead")
        holder: dict = {"max_batch": max(batches)}
        for bs in batches:
            yield Planned(NAME, f"{m.name}-b{bs}-c{context}", lambda b=b, m=m, dtype=dtype, bs=bs, context=context, holder=holder:
                          run_batch(ctx, b, m, dtype, bs, context, holder))
