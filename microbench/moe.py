"""moe suite: grouped expert GEMMs under skewed routing, CPU expert throughput C_C, host memory bandwidth B_D.

Grouped GEMMs (Chapter 9, §9.4.3): E local experts receive token counts c_e from a balanced, a
power-law or a hot-expert distribution with the same total; the work is timed four ways:
exact (each expert's c_e rows, one grouped kernel: torch._grouped_mm), padded to a tile (each
non-empty expert padded to a multiple of `tile` rows, the same grouped kernel), padded to the
largest expert (one batched GEMM, torch.bmm), and a Python loop of per-expert matmuls (labelled
`baseline`: at T = 64 its time is launch overhead). On CUDA every mode is a captured graph replay.
Useful FLOPs are the same, 2·Σc_e·3·H·I; padded FLOPs count the padded rows. The chapter's
example [32,16,8,4,2,1,1,0]: 64 useful rows, 224 padded to a 32-row tile (3.5×), 256 padded to
the maximum (4×).

C_C (Chapter 9, §9.3.2, example 9.3): one Qwen3-235B-A22B expert, P_e = 3·4096·1536 = 18 874 368
parameters (36 MiB in bf16), run on m tokens: F_e(m) = 2·m·P_e FLOPs; bytes = W_e + activations.
B_D: STREAM-style copy/scale/add/triad on float64 arrays; STREAM's counting (16, 16, 24, 24 bytes
per element) is the useful figure; numpy's triad runs two passes (a = s·c; a += b), which moves
40 bytes per element: that is its padded figure. Arrays should be several times the last-level
cache; the case says when they are not (the quick form on a large-LLC machine).
"""

from __future__ import annotations

import math
import os
from typing import Iterator

from harness.specs.models import get_model
from harness.units import MiB, dtype_bytes
from microbench.backends import Backend, quick_bf16_skip
from microbench.case import Skip, Work
from microbench.graph_step import time_step
from microbench.params import CpuExpertParams, HostBandwidthParams
from microbench.suite import Item, Planned, SuiteContext

NAME = "moe"
DESCRIPTION = "grouped expert GEMMs (balanced/power-law/hot, exact vs tile-padded), CPU expert C_C at Qwen3-235B shapes, STREAM B_D"

CHAPTER_COUNTS = (32, 16, 8, 4, 2, 1, 1, 0)  # Chapter 9, §9.4.3


def padded_rows(counts: list[int] | tuple[int, ...], tile: int) -> int:
    """Σ over non-empty experts of ceil(c/tile)·tile: rows a grouped GEMM padding each group to its tile executes."""
    return sum(math.ceil(c / tile) * tile for c in counts if c > 0)


def padded_rows_to_max(counts: list[int] | tuple[int, ...]) -> int:
    """E·max(c): rows when every expert is padded to the largest (one batched GEMM)."""
    return len(counts) * max(counts) if counts else 0


def distribution(kind: str, experts: int, total: int) -> list[int]:
    """Token counts per expert summing to `total`: balanced, power-law (Zipf, s=1.2) or hot (one expert takes half)."""
    if kind == "balanced":
        w = [1.0] * experts
    elif kind == "power-law":
        w = [1.0 / (i + 1) ** 1.2 for i in range(experts)]
    elif kind == "hot":
        w = [float(experts - 1)] + [1.0] * (experts - 1)
    else:
        raise ValueError(kind)
    raw = [total * x / sum(w) for x in w]
    counts = [int(r) for r in raw]
    for i in sorted(range(experts), key=lambda i: raw[i] - counts[i], reverse=True)[: total - sum(counts)]:
        counts[i] += 1  # largest remainders, so the counts sum exactly to total
    return counts


def expert_params(hidden: int, inter: int) -> int:
    """P_e = 3·H·I (gate, up, down)."""
    return 3 * hidden * inter


GROUPED_MODES = ("exact", "tile", "max", "loop")


def group_rows(counts: list[int] | tuple[int, ...], mode: str, tile: int) -> list[int]:
    """Rows each expert's GEMM executes: its own count (exact, loop), padded to the tile (tile), or to the largest (max)."""
    if mode in ("exact", "loop"):
        return list(counts)
    if mode == "tile":
        return [math.ceil(c / tile) * tile if c else 0 for c in counts]
    if mode == "max":
        return [max(counts)] * len(counts)
    raise ValueError(f"mode must be one of {GROUPED_MODES}, got {mode!r}")


def group_offsets(rows: list[int]) -> list[int]:
    """End row of each group in the stacked input (torch._grouped_mm's `offs`): the running sum."""
    out, acc = [], 0
    for r in rows:
        acc += r
        out.append(acc)
    return out


def grouped_work(counts: list[int] | tuple[int, ...], rows: list[int], hidden: int, inter: int, elem_bytes: float) -> Work:
    """Useful: 2·Σc_e·3·H·I FLOPs; weights of the experts with tokens + activations in and out (2·Σc_e·H elements).
    Padded: the rows executed (Σ rows_e) and the weights of every expert that runs any row."""
    useful_rows = sum(counts)
    pe = expert_params(hidden, inter)
    return Work(
        useful_flops=2.0 * useful_rows * pe,
        padded_flops=2.0 * sum(rows) * pe,
        useful_bytes=sum(1 for c in counts if c) * pe * elem_bytes + 2 * useful_rows * hidden * elem_bytes,
        padded_bytes=sum(1 for r in rows if r) * pe * elem_bytes + 2 * sum(rows) * hidden * elem_bytes,
    )


def _grouped(ctx: SuiteContext, b: Backend, kind: str, mode: str, counts: list[int], H: int, I: int, tile: int, dtype: str):
    """The expert SwiGLU of E experts on their routed rows. exact/tile: ONE grouped kernel per projection
    (torch._grouped_mm over the stacked rows, `offs` = group ends); max: torch.bmm padded to the largest
    expert; loop: a Python loop of per-expert matmuls, the labelled baseline (at small T its time is
    launch overhead). On CUDA each is captured into a CUDA graph and replayed (microbench.graph_step)."""
    t = b.module
    dt = b.dtype_of(dtype)
    E = len(counts)
    gen = t.Generator(device=b.device).manual_seed(ctx.seed)
    # weights stored [E, out, in] and passed transposed: the column-major second operand the grouped kernel wants
    wg = t.randn((E, I, H), generator=gen, device=b.device, dtype=dt).mul_(0.02)
    wu = t.randn((E, I, H), generator=gen, device=b.device, dtype=dt).mul_(0.02)
    wd = t.randn((E, H, I), generator=gen, device=b.device, dtype=dt).mul_(0.02)
    F = t.nn.functional
    rows = group_rows(counts, mode, tile)
    kernel = {"exact": "torch._grouped_mm", "tile": "torch._grouped_mm", "max": "torch.bmm", "loop": "python loop of torch.matmul"}[mode]
    if mode == "max":
        xb = t.randn((E, max(counts), H), generator=gen, device=b.device, dtype=dt)

        def run() -> None:
            y = F.silu(t.bmm(xb, wg.transpose(1, 2))) * t.bmm(xb, wu.transpose(1, 2))
            t.bmm(y, wd.transpose(1, 2))
    elif mode == "loop":
        xs = [t.randn((r, H), generator=gen, device=b.device, dtype=dt) if r else None for r in rows]

        def run() -> None:
            for e in range(E):
                if xs[e] is not None:
                    y = F.silu(xs[e] @ wg[e].T) * (xs[e] @ wu[e].T)
                    y @ wd[e].T
    else:
        if not hasattr(t, "_grouped_mm"):
            return Skip(NAME, f"grouped-{kind}-{mode}", f"torch {t.__version__} has no torch._grouped_mm; the loop baseline stands alone")
        x = t.randn((sum(rows), H), generator=gen, device=b.device, dtype=dt)
        offs = t.tensor(group_offsets(rows), dtype=t.int32, device=b.device)
        gm = t._grouped_mm

        def run() -> None:
            y = F.silu(gm(x, wg.transpose(-2, -1), offs=offs)) * gm(x, wu.transpose(-2, -1), offs=offs)
            gm(y, wd.transpose(-2, -1), offs=offs)

        try:
            run()
        except Exception as exc:  # noqa: BLE001 - a device or dtype the grouped kernel does not serve
            return Skip(NAME, f"grouped-{kind}-{mode}-E{E}-T{sum(counts)}",
                        f"torch._grouped_mm refused {dtype} on {b.device}: {str(exc).splitlines()[0][:200]}")
    st = time_step(b, run, ctx.policy)
    eb = dtype_bytes(dtype)
    work = grouped_work(counts, rows, H, I, eb)
    useful_rows = sum(counts)
    notes = list(st.notes)
    if mode == "exact":
        notes.append("padded FLOPs = useful: the grouped kernel's own tile padding inside each group is not visible from here")
    if mode == "loop":
        notes.append("baseline: one launch per expert and projection; not what a grouped-GEMM engine runs")
    return ctx.result(NAME, f"grouped-{kind}-{mode}-E{E}-T{useful_rows}", b, dtype,
                      {"distribution": kind, "mode": mode, "kernel": kernel, "baseline": mode == "loop", "counts": counts,
                       "rows_executed": sum(rows), "useful_rows": useful_rows, "padding_factor": sum(rows) / useful_rows, "tile": tile,
                       "hidden": H, "expert_intermediate": I, **st.params()}, work, st.primary, notes=tuple(notes))


def _expert_cc(ctx: SuiteContext, b: Backend, m_tokens: int, dtype: str):
    """One Qwen3-235B-A22B expert on m tokens: C_C = F_e(m) / t."""
    model = get_model("qwen3-235b-a22b")
    H, I = model.hidden_size, model.moe_intermediate_size
    eb = dtype_bytes(dtype)
    x = b.randn((m_tokens, H), dtype, ctx.seed)
    wg, wu, wd = (b.randn(shape, dtype, i + 1) * 0.02 for i, shape in enumerate([(H, I), (H, I), (I, H)]))  # small, so silu stays finite
    if b.name == "torch":
        F = b.module.nn.functional

        def run() -> None:
            (F.silu(x @ wg) * (x @ wu)) @ wd
    else:
        np = b.module

        def run() -> None:
            g = x @ wg
            g *= 1.0 / (1.0 + np.exp(-g))
            g *= x @ wu
            g @ wd
    m = b.time(run, ctx.policy)
    pe = expert_params(H, I)
    work = Work(useful_flops=2.0 * m_tokens * pe, useful_bytes=pe * eb + 2 * m_tokens * H * eb)
    return ctx.result(NAME, f"expert-cc-qwen3-235b-m{m_tokens}", b, dtype,
                      CpuExpertParams(tokens=m_tokens, expert_params=pe, expert_weight_bytes=pe * eb,
                                      extra={"kind": "cpu_expert", "measures": "C_C (§9.3.2)"}).to_params(), work, m,
                      cache_state=_llc_note(b, pe * eb))


def _llc_note(b: Backend, nbytes: float) -> str:
    if not b.cache_bytes:
        return f"{b.cache_name} size unknown"
    if nbytes > 2 * b.cache_bytes:
        return f"cold: {nbytes / MiB:.4g} MiB > 2× {b.cache_name} ({b.cache_bytes / MiB:.4g} MiB)"
    return f"warm: {nbytes / MiB:.4g} MiB fits within 2× {b.cache_name} ({b.cache_bytes / MiB:.4g} MiB); repeats read weights from cache"


STREAM_BYTES_PER_ELEM = {"copy": 16, "scale": 16, "add": 24, "triad": 24}  # STREAM's counting, float64


def _stream(ctx: SuiteContext, b: Backend, kernel: str, n_elem: int):
    """STREAM kernels on float64 arrays of n_elem; useful bytes per STREAM, padded = what the backend really moves."""
    s = 3.0
    if b.name == "torch":
        t = b.module
        a, bb, c = t.zeros(n_elem, dtype=t.float64), t.ones(n_elem, dtype=t.float64), t.full((n_elem,), 2.0, dtype=t.float64)
        fns = {"copy": lambda: c.copy_(a), "scale": lambda: t.mul(c, s, out=bb), "add": lambda: t.add(a, bb, out=c),
               "triad": lambda: t.add(bb, c, alpha=s, out=a)}
        passes = STREAM_BYTES_PER_ELEM
    else:
        np = b.module
        a, bb, c = np.zeros(n_elem), np.ones(n_elem), np.full(n_elem, 2.0)

        def triad() -> None:
            np.multiply(c, s, out=a)
            np.add(a, bb, out=a)

        fns = {"copy": lambda: np.copyto(c, a), "scale": lambda: np.multiply(c, s, out=bb), "add": lambda: np.add(a, bb, out=c),
               "triad": triad}
        passes = {**STREAM_BYTES_PER_ELEM, "triad": 40}
    m = b.time(fns[kernel], ctx.policy)
    arr = n_elem * 8
    work = Work(useful_bytes=float(STREAM_BYTES_PER_ELEM[kernel] * n_elem), padded_bytes=float(passes[kernel] * n_elem))
    note = () if not b.cache_bytes or arr >= 4 * b.cache_bytes else (
        f"arrays of {arr / MiB:.4g} MiB are smaller than 4× the {b.cache_name} ({b.cache_bytes / MiB:.4g} MiB): "
        "this is not a DRAM B_D; run without --quick for arrays sized to the cache",)
    return ctx.result(NAME, f"stream-{kernel}-{arr // MiB}MiB", b, "fp64",
                      HostBandwidthParams(op=kernel, array_bytes=arr, write_allocate_counted=False,
                                          extra={"kind": "host_bandwidth", "kernel": kernel, "measures": "B_D (§9.3.2)"}).to_params(),
                      work, m, cache_state=_llc_note(b, 3 * arr), notes=note)


def _stream_elems(ctx: SuiteContext, b: Backend) -> int:
    if ctx.quick:
        return 4 * 2**20  # 32 MiB per array
    want = 4 * (b.cache_bytes or 64 * MiB)
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        want = min(want, avail / 8)  # three arrays and headroom
    except (ValueError, OSError, AttributeError):
        pass
    return int(max(want, 256 * MiB) // 8)


def cases(ctx: SuiteContext) -> Iterator[Item]:
    kinds = ("balanced", "power-law", "hot")
    for b in ctx.backends:
        if b.name == "torch":
            if b.is_cuda:
                model = get_model("qwen3-235b-a22b")
                H, I, E, T, tile, dtype = model.hidden_size, model.moe_intermediate_size, 8, (64 if ctx.quick else 512), 64, "bf16"
            else:
                H, I, E, T, tile, dtype = (1024, 384, 8, 64, 32, "fp32") if ctx.quick else (4096, 1536, 8, 256, 32, "fp32")
            for kind in kinds:
                # with 8 experts and 64 assignments the power-law case is the chapter's own [32,16,8,4,2,1,1,0]
                counts = list(CHAPTER_COUNTS) if (kind == "power-law" and T == 64 and E == 8) else distribution(kind, E, T)
                for mode in GROUPED_MODES:
                    if mode == "loop" and ctx.quick and not b.is_cuda and kind != "power-law":
                        continue  # the CPU quick form keeps one baseline
                    yield Planned(NAME, f"grouped-{kind}-{mode}", lambda b=b, kind=kind, mode=mode, counts=counts, H=H, I=I, tile=tile, dtype=dtype:
                                  _grouped(ctx, b, kind, mode, counts, H, I, tile, dtype))
        if b.is_cuda:
            continue
        for dtype in (("bf16", "fp32") if b.name == "torch" else ("fp32",)):
            why = quick_bf16_skip(b, dtype) if ctx.quick else None
            if why:
                yield Skip(NAME, f"expert-cc-{b.label}-{dtype}", why)
                continue
            for m_tok in ((1, 128) if ctx.quick else (1, 16, 64, 128, 512)):
                yield Planned(NAME, f"expert-cc-m{m_tok}", lambda b=b, m_tok=m_tok, dtype=dtype: _expert_cc(ctx, b, m_tok, dtype))
        if b.name == "numpy":
            yield Skip(NAME, "grouped-numpy", "grouped expert GEMMs are measured with torch (numpy has no batched bf16 GEMM)")
        for kernel in (("copy", "triad") if ctx.quick else ("copy", "scale", "add", "triad")):
            yield Planned(NAME, f"stream-{kernel}", lambda b=b, kernel=kernel: _stream(ctx, b, kernel, _stream_elems(ctx, b)))
