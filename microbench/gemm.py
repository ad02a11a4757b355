"""gemm suite: prefill-shaped matmuls of a model's projections (Qwen3-8B at 512…8192 tokens).

Each case is C[M,N] = A[M,K] · W[K,N] with M = tokens. Counted work (Chapter 9, §9.2.3: 2 FLOPs
per multiply-add): useful_flops = 2·M·N·K; useful_bytes = (M·K + K·N)·input bytes + M·N·output
bytes (each input read once, the output written once: the fewest bytes the product must move).
fp8: inputs e4m3 (1 B), output bf16 (2 B), `torch._scaled_mm(..., use_fast_accum=True)` as
inference engines run it (the fast-accumulation path; without it Hopper accumulates in a slower
split mode and the rate is not the one engines see).
GPU: bf16 and fp16, fp8 where the GPU has it, plus the 8192³ bf16 square case the device check
compares with triton.testing.do_bench. CPU: fp32 and bf16 with torch, fp32 with numpy; --quick
runs one small projection.
Cache: input sets rotate so that together they exceed 2× the L2 (no flush needed, and a tiny
GEMM can still be replayed many times from one CUDA graph, as do_bench_cudagraph does); where
the memory cap keeps the sets under that, the L2 is flushed before every call instead.
"""

from __future__ import annotations

from typing import Any, Iterator

from harness.specs.models import ModelSpec, get_model
from harness.units import dtype_bytes
from microbench.backends import Backend, quick_bf16_skip
from microbench.case import Skip, Work
from microbench.params import GemmParams
from microbench.suite import Item, Planned, SuiteContext
from microbench.timing import cache_state, rotation_sets

NAME = "gemm"
DESCRIPTION = "prefill-shaped matmuls of Qwen3-8B projections (512…8192 tokens), bf16/fp16/fp8 on GPU, fp32/bf16 on CPU"


def projections(m: ModelSpec) -> dict[str, tuple[int, int]]:
    """(K, N) of each linear layer of a GQA block: qkv, o, gate_up (fused), down."""
    q = m.n_heads * m.head_dim
    kv = m.n_kv_heads * m.head_dim
    return {
        "qkv": (m.hidden_size, q + 2 * kv),
        "o": (q, m.hidden_size),
        "gate_up": (m.hidden_size, 2 * m.intermediate_size),
        "down": (m.intermediate_size, m.hidden_size),
    }


OUTPUT_DTYPE = {"fp8": "bf16"}  # _scaled_mm writes bf16; every other dtype writes its own


def gemm_work(m_rows: int, n: int, k: int, elem_bytes: float, out_bytes: float | None = None) -> Work:
    """2·M·N·K FLOPs; (MK + KN)·b_in + MN·b_out bytes (b_out = b_in unless given)."""
    ob = elem_bytes if out_bytes is None else out_bytes
    return Work(useful_flops=2.0 * m_rows * n * k, useful_bytes=(m_rows * k + k * n) * elem_bytes + m_rows * n * ob)


def matmul_thunk(b: Backend, m_rows: int, n: int, k: int, dtype: str, sets: int, seed: int) -> Any:
    """A no-argument callable doing one M×K·K×N product, rotating through `sets` input sets."""
    if dtype == "fp8":
        return _fp8_thunk(b, m_rows, n, k, sets, seed)
    a_sets = [b.randn((m_rows, k), dtype, seed + 2 * i) for i in range(sets)]
    w_sets = [b.randn((k, n), dtype, seed + 2 * i + 1) for i in range(sets)]
    if b.name == "torch":
        out = b.module.empty((m_rows, n), dtype=b.dtype_of(dtype), device=b.device)
        mm = b.module.matmul
    else:
        out = b.module.empty((m_rows, n), dtype=b.dtype_of(dtype))
        mm = b.module.matmul
    state = {"i": 0}

    def run() -> None:
        i = state["i"]
        state["i"] = (i + 1) % sets
        mm(a_sets[i], w_sets[i], out=out)

    return run


def _fp8_thunk(b: Backend, m_rows: int, n: int, k: int, sets: int, seed: int) -> Any:
    t = b.module
    a_sets = [b.randn((m_rows, k), "fp32", seed + 2 * i).to(t.float8_e4m3fn) for i in range(sets)]
    # _scaled_mm wants the second operand column-major
    w_sets = [b.randn((n, k), "fp32", seed + 2 * i + 1).to(t.float8_e4m3fn).t() for i in range(sets)]
    one = t.ones((), device=b.device, dtype=t.float32)
    state = {"i": 0}

    def run() -> None:
        i = state["i"]
        state["i"] = (i + 1) % sets
        t._scaled_mm(a_sets[i], w_sets[i], scale_a=one, scale_b=one, out_dtype=t.bfloat16, use_fast_accum=True)

    run()
    return run


def time_gemm(ctx: SuiteContext, b: Backend, case: str, m_rows: int, n: int, k: int, dtype: str, params: dict):
    eb = dtype_bytes(dtype)
    out_dtype = OUTPUT_DTYPE.get(dtype, dtype)
    work = gemm_work(m_rows, n, k, eb, dtype_bytes(out_dtype))
    ws = work.useful_bytes
    cap = (256 if ctx.quick else 2048) * 2**20 if not b.is_cuda else 16 * 2**30
    max_sets = 2 if (ctx.quick and not b.is_cuda) else (32 if b.is_cuda else 8)
    sets = rotation_sets(ws, b.cache_bytes, max_sets=max_sets, memory_cap_bytes=cap)
    fn = matmul_thunk(b, m_rows, n, k, dtype, sets, ctx.seed)
    l2 = gemm_l2_mode(ws, sets, b.cache_bytes)
    m = b.time(fn, ctx.policy, l2=l2)
    state = cache_state(ws, sets, b.cache_bytes, b.cache_name)
    if b.is_cuda and l2 == "flush":
        state = f"cold: {b.cache_name} flushed before every call ({sets} set(s) of {ws / 2**20:.3g} MiB do not exceed 2× {b.cache_name})"
    return ctx.result(NAME, case, b, dtype, GemmParams.of(**params, m=m_rows, n=n, k=k, input_sets=sets, output_dtype=out_dtype,
                                                          fast_accum=dtype == "fp8" or None, l2=l2).to_params(), work, m, cache_state=state)


def gemm_l2_mode(working_set_bytes: float, sets: int, cache_bytes: float | None) -> str:
    """"rotated" when the rotating input sets together exceed 2× the cache, else "flush" (before every call)."""
    if cache_bytes and working_set_bytes * sets >= 2 * cache_bytes:
        return "rotated"
    return "flush"


def cases(ctx: SuiteContext) -> Iterator[Item]:
    model = get_model(ctx.options.get("model", "qwen3-8b"))
    proj = projections(model)
    for b in ctx.backends:
        if b.is_cuda:
            dtypes = ["bf16", "fp16", "fp8"]
            tokens = [512, 8192] if ctx.quick else [512, 1024, 2048, 4096, 8192]
            shapes = ["qkv", "gate_up"] if ctx.quick else list(proj)
        else:
            dtypes = ["fp32", "bf16"]  # numpy records bf16 as a skip, with the reason
            tokens = [32, 128] if ctx.quick else [32, 128, 512]  # two counts, so a quick run still gives an efficiency curve
            shapes = ["o"] if ctx.quick else list(proj)
        for dtype in dtypes:
            why = b.supports(dtype)
            if not why and ctx.quick:
                why = quick_bf16_skip(b, dtype)
            if why:
                yield Skip(NAME, f"{b.label}-{dtype}", why)
                continue
            for shape in shapes:
                k, n = proj[shape]
                for t in tokens:
                    case = f"{model.name}-{shape}-t{t}"
                    yield Planned(NAME, case, lambda b=b, case=case, t=t, n=n, k=k, dtype=dtype, shape=shape:
                                  time_gemm(ctx, b, case, t, n, k, dtype, {"model": model.name, "projection": shape, "tokens": t}))
        if b.is_cuda:
            yield Planned(NAME, "square-8192", lambda b=b: time_gemm(ctx, b, "square-8192", 8192, 8192, 8192, "bf16", {"square": True}))
