"""transfer suite: copies across every path a KV page or a weight set takes, 4 KiB…1 GiB.

GPU: host→device and device→host from pinned and pageable memory, device→device, peer (with
two GPUs), bidirectional (H2D and D2H at once on two streams), and a copy overlapped with a GEMM
(the slowdown of each, Chapter 9, §9.4.3: DMA contending with a GEMM for HBM).
CPU: memcpy between buffers, a copy overlapped with a matmul (two threads), and a copy between
processes through shared memory.
Both: one large copy vs N chunks of the same total: the Chapter 9 §9.5 page case, 72 segments of
32 KiB (K and V of 36 layers) against one 2.25 MiB page.

Counting (`counted_bytes`): a copy inside one memory (CPU memcpy, device→device) moves its payload
twice, a read and a write, and that is what is counted (the device check's 4.3 TB/s is counted this
way; nvbandwidth's device_local_copy counts the payload once, so each d2d case also records
`payload_bytes_per_s`); a copy across a link (H2D, D2H, peer) counts the payload once against the
per-direction peak of this device's own link (PCIe from NVML by bus id, NVLink by active links).
A figure above its peak is flagged and the row marked invalid (microbench.case.derive).
Cache: every GPU copy rotates over a ring of (src, dst) slots that together exceed 2× the L2, so a
repeat reads HBM, not L2 (`copy_ring_slots`); the cases say when the 64-slot cap leaves tiny copies warm.
Small copies, two α's (`ALPHA_KINDS`): "stream" queues copies back to back (grouped, and replayed from
a CUDA graph when small and capturable), the per-copy cost of a pipelined transfer; "single" issues
one copy and waits for it (host clock), the latency a waiting request sees. The transfer model gets
the "single" α (`alpha_for_model` = true on those rows).
Copy engine vs SM (as nvbandwidth separates them): "ce" rows use Tensor.copy_ (cudaMemcpyAsync);
d2d-sm rows an elementwise kernel (torch.bitwise_or on int64 views); host↔device SM copies are a skip.
Peer (cuda:0 → cuda:1) when two GPUs are visible.
Sizes: two per octave (2^k and 2^(k+1/2), rounded to 256 bytes).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
import time as _time
from multiprocessing import shared_memory
from typing import Any, Iterator

import numpy as np

from harness.units import KiB, MiB
from microbench.backends import Backend
from microbench.case import Peak, Skip, Work
from microbench.gpu_link import read_nvlink_peak, read_pcie_link
from microbench.suite import Item, Planned, SuiteContext
from microbench.graph_step import time_step
from microbench.params import TransferParams
from microbench.timing import cache_state, measurement_from_samples, rotation_sets, time_cpu

NAME = "transfer"
DESCRIPTION = "H2D/D2H pinned+pageable, D2D, peer, bidirectional, copy||GEMM; CPU memcpy, shared memory; 72×32 KiB vs 2.25 MiB"

PAGE_SEGMENTS, SEGMENT_BYTES = 72, 32 * KiB  # Chapter 9, §9.5: 36 layers × (K, V) of a 16-token Qwen3-8B page


def sizes_two_per_octave(lo: int, hi: int, align: int = 256) -> list[int]:
    """lo…hi with two points per octave (2^k, 2^(k+1/2)), rounded to `align`, de-duplicated."""
    out: list[int] = []
    k = math.log2(lo)
    while 2**k <= hi * 1.0001:
        s = int(round(2**k / align) * align)
        if s >= lo and (not out or s != out[-1]):
            out.append(s)
        k += 0.5
    return out


def pcie_peak(b: Backend) -> Peak:
    """Per-direction theoretical peak of the PCIe link of THIS torch device (found in NVML by its bus id,
    microbench.gpu_link): max generation × current width, so a link trained down to x8 shows as such."""
    if not b.is_cuda:
        return Peak(None, None, "no PCIe link: a CPU backend")

    return read_pcie_link(b.module, b.index).peak()


def counted_bytes(kind: str, payload: int) -> tuple[float, str]:
    """Bytes a copy case counts and the convention's name. A copy inside one memory (d2d, CPU memcpy) reads
    and writes the payload: 2× (what HBM moves; nvbandwidth's device_local_copy counts the payload once, so
    its figure is half of ours for the same time, recorded as `payload_bytes_per_s`). A copy across a link
    (h2d, d2h, peer) counts the payload once against the link's per-direction peak."""
    if kind in ("d2d", "d2d-sm", "memcpy"):
        return 2.0 * payload, "read+write"
    return float(payload), "once"


def copy_ring_slots(payload: int, kind: str, cache_bytes: float | None, *, max_slots: int = 64,
                    memory_cap_bytes: float = 4 * 2**30) -> int:
    """Rotating (src, dst) slots so that the device memory a run of copies touches exceeds 2× the L2: a repeat
    then reads from HBM, not from the cache (a d2d copy of <= ~30 MiB would otherwise be served from the H200's
    60 MB L2 and beat the HBM peak)."""
    touched = 2 * payload if kind.startswith("d2d") else payload
    return rotation_sets(touched, cache_bytes, max_sets=max_slots, memory_cap_bytes=memory_cap_bytes)


def copy_method(engine: str, mode: str) -> str:
    """How a copy was issued, one string (calibration fits one α–β line per link, direction, memory and method)."""
    return f"{'sm_kernel' if engine == 'sm' else 'copy_engine'}:{'pipelined' if mode == 'stream' else 'single'}"


ALPHA_KINDS = {
    "stream": "pipelined stream: copies queued back to back (graph-replayed when small), per-copy issue cost",
    "single": "synchronized single copy: issue, then wait for completion (host clock); the latency a waiting request sees",
}
MODEL_ALPHA = "single"  # the α the transfer model (t = α + n/β) gets: a KV hand-off is waited on


# ---------------------------------------------------------------- CPU


def _cpu_copy_case(ctx: SuiteContext, b: Backend, size: int) -> Any:
    if b.name == "torch":
        t = b.module
        src = t.ones(size, dtype=t.uint8)
        dst = t.empty(size, dtype=t.uint8)
        fn = lambda: dst.copy_(src)  # noqa: E731
    else:
        np = b.module
        src = np.ones(size, dtype=np.uint8)
        dst = np.empty(size, dtype=np.uint8)
        fn = lambda: np.copyto(dst, src)  # noqa: E731
    m = b.time(fn, ctx.policy)
    return ctx.result(NAME, f"memcpy-{size}", b, "uint8", TransferParams(link="memcpy", direction="h2h", size_bytes=size, bytes_counted="read+write",
                                                                         extra={"payload_bytes": size}).to_params(),
                      Work(useful_bytes=2.0 * size), m, cache_state=_fits(b, 2 * size))


def _fits(b: Backend, nbytes: float) -> str:
    if not b.cache_bytes:
        return f"{b.cache_name} size unknown"
    return ("cold: " if nbytes > 2 * b.cache_bytes else "warm: ") + f"{nbytes / MiB:.4g} MiB touched vs {b.cache_name} {b.cache_bytes / MiB:.4g} MiB"


def _chunk_cases(ctx: SuiteContext, b: Backend, copy_factory) -> list:
    """One 2.25 MiB copy vs 72 copies of 32 KiB: same bytes, 72× the per-copy overhead. GPU: also the 72 copies
    captured in one CUDA graph (the per-copy cost without the host's launch)."""
    total = PAGE_SEGMENTS * SEGMENT_BYTES
    one, many, dtype, counted, peak = copy_factory(total)
    out = []
    l2 = "warm"  # the same 2.25 MiB page each time: the case is about per-copy overhead, not bandwidth
    m1 = b.time(one, ctx.policy, allow_graph=False, l2=l2)  # a graph would hide the per-copy launch cost this case measures
    mN = b.time(many, ctx.policy, allow_graph=False, l2=l2)
    if b.is_cuda:
        st = time_step(b, many, ctx.policy, l2=l2, eager=False)
        if st.graph is not None:
            out.append(ctx.result(NAME, "page-72x32KiB-graph", b, dtype,
                                  {"total_bytes": total, "size_bytes": total, "bytes_counted": counted, "copies": PAGE_SEGMENTS,
                                   "chunks": PAGE_SEGMENTS, "mode": "graph", "overhead_per_extra_copy_s":
                                   (st.graph.stats.median_s - m1.stats.median_s) / (PAGE_SEGMENTS - 1)},
                                  Work(useful_bytes=total * (2 if counted == "read+write" else 1)), st.graph, peak, notes=st.notes))
    ratio = mN.stats.median_s / m1.stats.median_s
    per_copy_s = (mN.stats.median_s - m1.stats.median_s) / (PAGE_SEGMENTS - 1)
    common = {"total_bytes": total, "size_bytes": total, "bytes_counted": counted}
    out.append(ctx.result(NAME, "page-1x2304KiB", b, dtype, {**common, "copies": 1, "chunks": 1}, Work(useful_bytes=total * (2 if counted == "read+write" else 1)), m1, peak))
    out.append(ctx.result(NAME, "page-72x32KiB", b, dtype, {**common, "copies": PAGE_SEGMENTS, "chunks": PAGE_SEGMENTS, "time_ratio_vs_one_copy": ratio,
                                                            "overhead_per_extra_copy_s": per_copy_s},
                          Work(useful_bytes=total * (2 if counted == "read+write" else 1)), mN, peak))
    return out


def _cpu_chunk_factory(b: Backend):
    def make(total: int):
        if b.name == "torch":
            t = b.module
            src, dst = t.ones(total, dtype=t.uint8), t.empty(total, dtype=t.uint8)
            segs = [(dst[i * SEGMENT_BYTES:(i + 1) * SEGMENT_BYTES], src[i * SEGMENT_BYTES:(i + 1) * SEGMENT_BYTES]) for i in range(PAGE_SEGMENTS)]
            one = lambda: dst.copy_(src)  # noqa: E731

            def many() -> None:
                for d, s in segs:
                    d.copy_(s)
        else:
            np = b.module
            src, dst = np.ones(total, dtype=np.uint8), np.empty(total, dtype=np.uint8)
            segs = [(dst[i * SEGMENT_BYTES:(i + 1) * SEGMENT_BYTES], src[i * SEGMENT_BYTES:(i + 1) * SEGMENT_BYTES]) for i in range(PAGE_SEGMENTS)]
            one = lambda: np.copyto(dst, src)  # noqa: E731

            def many() -> None:
                for d, s in segs:
                    np.copyto(d, s)
        return one, many, "uint8", "read+write", b.peak("fp32")

    return make


def _shm_child(conn: Any, name: str, size: int) -> None:
    shm = shared_memory.SharedMemory(name=name)
    try:
        src = np.ndarray((size,), dtype=np.uint8, buffer=shm.buf)
        dst = np.empty(size, dtype=np.uint8)
        while True:
            n = conn.recv()
            if n < 0:
                break
            if n:
                np.copyto(dst[:n], src[:n])
            conn.send(n)
    finally:
        del src
        shm.close()


def _shm_cases(ctx: SuiteContext, b: Backend, sizes: list[int]) -> list:
    """Another process copies n bytes out of a shared-memory segment; timed round trip over a pipe.
    The 0-byte case is the pipe round trip alone, the fixed cost of each hand-off."""
    np = b.module
    cap = max(sizes)
    shm = shared_memory.SharedMemory(create=True, size=cap)
    parent, child = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(target=_shm_child, args=(child, shm.name, cap), daemon=True)
    out = []
    try:
        np.ndarray((cap,), dtype=np.uint8, buffer=shm.buf)[:] = 1
        proc.start()
        for n in [0, *sizes]:
            def hand_off(n=n) -> None:
                parent.send(n)
                parent.recv()

            m = time_cpu(hand_off, ctx.policy)
            out.append(ctx.result(NAME, f"shm-process-{n}", b, "uint8", TransferParams(link="shm-process", direction="h2h", size_bytes=n, bytes_counted="read+write",
                                                                         extra={"payload_bytes": n, "includes": "pipe round trip to the other process"}).to_params(),
                                  Work(useful_bytes=2.0 * n), m))
    finally:
        if proc.is_alive():
            parent.send(-1)
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        shm.close()
        shm.unlink()
    return out


def _cpu_overlap(ctx: SuiteContext, b: Backend) -> list:
    """A memcpy and a matmul at once on two threads: each one's time alone and together (§9.4.3 contention)."""
    t = b.module
    size = (16 if ctx.quick else 256) * MiB
    src, dst = t.ones(size, dtype=t.uint8), t.empty(size, dtype=t.uint8)
    n = 256 if ctx.quick else 1024
    a, w, c = t.randn(n, n), t.randn(n, n), t.empty(n, n)
    copy = lambda: dst.copy_(src)  # noqa: E731
    gemm = lambda: t.matmul(a, w, out=c)  # noqa: E731
    alone_copy, alone_gemm = b.time(copy, ctx.policy), b.time(gemm, ctx.policy)
    reps = max(3, min(50, int(ctx.policy.budget_s / max(alone_copy.stats.median_s, alone_gemm.stats.median_s))))
    times: dict[str, list[float]] = {"copy": [], "gemm": []}

    def loop(name: str, fn: Any, start: threading.Barrier) -> None:
        start.wait()
        for _ in range(reps):
            t0 = _time.perf_counter_ns()
            fn()
            times[name].append((_time.perf_counter_ns() - t0) / 1e9)

    barrier = threading.Barrier(2)
    th = [threading.Thread(target=loop, args=("copy", copy, barrier)), threading.Thread(target=loop, args=("gemm", gemm, barrier))]
    for x in th:
        x.start()
    for x in th:
        x.join()
    mc = measurement_from_samples(times["copy"], 1, "perf_counter_ns", ctx.policy)
    mg = measurement_from_samples(times["gemm"], 1, "perf_counter_ns", ctx.policy)
    note = ("the two loops run the same number of repetitions, so the shorter one's last samples can run alone; "
            "the median is taken over the overlapped part in the common case")
    return [
        ctx.result(NAME, f"copy-alone-{size}", b, "uint8", {"payload_bytes": size, "overlap": True, "role": "alone reference"}, Work(useful_bytes=2.0 * size), alone_copy),
        ctx.result(NAME, f"gemm-alone-{n}", b, "fp32", {"n": n}, Work(useful_flops=2.0 * n**3, useful_bytes=12.0 * n * n), alone_gemm),
        ctx.result(NAME, f"copy-during-gemm-{size}", b, "uint8", {"payload_bytes": size, "overlap": True, "slowdown": mc.stats.median_s / alone_copy.stats.median_s},
                   Work(useful_bytes=2.0 * size), mc, notes=(note,)),
        ctx.result(NAME, f"gemm-during-copy-{n}", b, "fp32", {"n": n, "overlap": True, "slowdown": mg.stats.median_s / alone_gemm.stats.median_s},
                   Work(useful_flops=2.0 * n**3, useful_bytes=12.0 * n * n), mg, notes=(note,)),
    ]


# ---------------------------------------------------------------- GPU


def _gpu_copy(ctx: SuiteContext, b: Backend, kind: str, size: int, mode: str = "stream") -> Any:
    """One GPU copy case. kind: h2d-/d2h-pinned/-pageable, d2d (cudaMemcpyAsync: copy engine), d2d-sm (an
    elementwise kernel: SM copy), peer (cuda:0 -> cuda:1). mode: "stream" or "single" (ALPHA_KINDS)."""
    t = b.module
    dev = b.device
    slots = copy_ring_slots(size, kind, b.cache_bytes)
    if kind in ("d2d", "d2d-sm"):
        src, dst = t.ones(slots * size, dtype=t.uint8, device=dev), t.empty(slots * size, dtype=t.uint8, device=dev)
        peak, link, engine = b.peak("bf16"), "hbm", ("sm" if kind == "d2d-sm" else "ce")
    elif kind == "peer":
        src = t.ones(slots * size, dtype=t.uint8, device=dev)
        dst = t.empty(slots * size, dtype=t.uint8, device="cuda:1")

        peak = read_nvlink_peak(t, b.index)
        link, engine = ("nvlink" if peak.bytes_per_s else "pcie-p2p"), "ce"
        if not peak.bytes_per_s:
            peak = pcie_peak(b)
    else:
        pinned = kind.endswith("pinned")
        host = t.ones(slots * size if pinned else size, dtype=t.uint8, pin_memory=pinned)
        devbuf = t.empty(slots * size, dtype=t.uint8, device=dev)
        src, dst = (host, devbuf) if kind.startswith("h2d") else (devbuf, host)
        peak, link, engine = pcie_peak(b), "pcie", "ce"
    views = [(dst[i * size:(i + 1) * size] if dst.numel() > size else dst, src[i * size:(i + 1) * size] if src.numel() > size else src)
             for i in range(slots)]
    if engine == "sm":
        views = [(d.view(t.int64), s_.view(t.int64)) for d, s_ in views]
    nb = not kind.endswith("pageable")
    state = {"i": 0}

    def copy() -> None:
        i = state["i"]
        state["i"] = (i + 1) % slots
        d, s_ = views[i]
        if engine == "sm":
            t.bitwise_or(s_, 0, out=d)  # an elementwise kernel: the SMs read and write, no copy engine
        else:
            d.copy_(s_, non_blocking=nb)

    if mode == "single":
        stream = t.cuda.current_stream()

        def single() -> None:
            copy()
            stream.synchronize()

        meas = time_cpu(single, ctx.policy)
    else:
        meas = b.time(copy, ctx.policy, l2="rotated", allow_graph=nb)
    nbytes, convention = counted_bytes(kind, size)
    median = meas.stats.median_s
    extra = {"payload_bytes": size, "copy_engine": engine,
             "copy_call": "torch.bitwise_or on int64 views (SM kernel)" if engine == "sm" else "Tensor.copy_ (cudaMemcpyAsync)",
             "mode": mode, "alpha_kind": ALPHA_KINDS[mode], "alpha_for_model": mode == MODEL_ALPHA, "ring_slots": slots,
             "payload_bytes_per_s": size / median if median > 0 else None}
    if kind == "peer":
        extra["peer_access"] = bool(t.cuda.can_device_access_peer(0, 1))
    params = TransferParams(link=link, direction=kind.split("-")[0], size_bytes=size, bytes_counted=convention,
                            memory=kind.split("-")[1] if kind.startswith(("h2d", "d2h")) else None,
                            method=copy_method(engine, mode), extra=extra).to_params()
    case = f"{kind}-{size}" + ("-single" if mode == "single" else "")
    return ctx.result(NAME, case, b, "uint8", params, Work(useful_bytes=nbytes), meas, peak,
                      cache_state=cache_state(2 * size if kind.startswith("d2d") else size, slots, b.cache_bytes, b.cache_name))


def _gpu_chunk_factory(b: Backend):
    def make(total: int):
        t = b.module
        host = t.ones(total, dtype=t.uint8, pin_memory=True)
        dev = t.empty(total, dtype=t.uint8, device=b.device)
        segs = [(dev[i * SEGMENT_BYTES:(i + 1) * SEGMENT_BYTES], host[i * SEGMENT_BYTES:(i + 1) * SEGMENT_BYTES]) for i in range(PAGE_SEGMENTS)]
        one = lambda: dev.copy_(host, non_blocking=True)  # noqa: E731

        def many() -> None:
            for d, s in segs:
                d.copy_(s, non_blocking=True)

        return one, many, "uint8", "once", pcie_peak(b)

    return make


def _gpu_bidir(ctx: SuiteContext, b: Backend, size: int) -> Any:
    t = b.module
    h_in = t.ones(size, dtype=t.uint8, pin_memory=True)
    h_out = t.empty(size, dtype=t.uint8, pin_memory=True)
    d_in, d_out = t.empty(size, dtype=t.uint8, device=b.device), t.ones(size, dtype=t.uint8, device=b.device)
    s1, s2 = t.cuda.Stream(), t.cuda.Stream()
    cur = t.cuda.current_stream()

    def both() -> None:
        s1.wait_stream(cur)
        s2.wait_stream(cur)
        with t.cuda.stream(s1):
            d_in.copy_(h_in, non_blocking=True)
        with t.cuda.stream(s2):
            h_out.copy_(d_out, non_blocking=True)
        cur.wait_stream(s1)
        cur.wait_stream(s2)

    m = b.time(both, ctx.policy, allow_graph=False)
    pk = pcie_peak(b)
    return ctx.result(NAME, f"bidir-pinned-{size}", b, "uint8", {"payload_bytes_each_way": size, "size_bytes": size, "bidirectional": True},
                      Work(useful_bytes=2.0 * size), m, Peak(None, 2 * pk.bytes_per_s if pk.bytes_per_s else None, pk.source + " ×2 directions"))


def _gpu_overlap(ctx: SuiteContext, b: Backend) -> list:
    """D2H of a pinned buffer while an 8192³ bf16 GEMM runs on another stream; per-stream events give each one's time."""
    t = b.module
    n = 8192
    size = 1024 * MiB
    a, w = b.randn((n, n), "bf16", 1), b.randn((n, n), "bf16", 2)
    c = t.empty((n, n), dtype=t.bfloat16, device=b.device)
    host = t.empty(size, dtype=t.uint8, pin_memory=True)
    dev = t.ones(size, dtype=t.uint8, device=b.device)
    gemm = lambda: t.matmul(a, w, out=c)  # noqa: E731
    copy = lambda: host.copy_(dev, non_blocking=True)  # noqa: E731
    alone_g = b.time(gemm, ctx.policy, allow_graph=False)
    alone_c = b.time(copy, ctx.policy, allow_graph=False)
    sg, sc = t.cuda.Stream(), t.cuda.Stream()
    reps = 5 if ctx.quick else 20
    tg, tc = [], []
    for _ in range(reps):
        t.cuda.synchronize()
        eg0, eg1, ec0, ec1 = (t.cuda.Event(enable_timing=True) for _ in range(4))
        with t.cuda.stream(sg):
            eg0.record()
            k = max(1, round(alone_c.stats.median_s / alone_g.stats.median_s))  # keep the GEMM stream busy for the copy
            for _ in range(k):
                gemm()
            eg1.record()
        with t.cuda.stream(sc):
            ec0.record()
            copy()
            ec1.record()
        t.cuda.synchronize()
        tg.append(eg0.elapsed_time(eg1) / 1e3 / k)
        tc.append(ec0.elapsed_time(ec1) / 1e3)
    mg = measurement_from_samples(tg, 1, "cuda-events", ctx.policy)
    mc = measurement_from_samples(tc, 1, "cuda-events", ctx.policy)
    gw = Work(useful_flops=2.0 * n**3, useful_bytes=3.0 * n * n * 2)
    return [
        ctx.result(NAME, "gemm-during-d2h", b, "bf16", {"n": n, "overlap": True, "slowdown": mg.stats.median_s / alone_g.stats.median_s,
                                                         "alone_median_s": alone_g.stats.median_s}, gw, mg),
        ctx.result(NAME, "d2h-during-gemm", b, "uint8", {"payload_bytes": size, "overlap": True, "slowdown": mc.stats.median_s / alone_c.stats.median_s,
                                                          "alone_median_s": alone_c.stats.median_s}, Work(useful_bytes=float(size)), mc, pcie_peak(b)),
    ]


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.is_cuda:
            hi = 256 * MiB if ctx.quick else 1024 * MiB
            sizes = sizes_two_per_octave(4 * KiB, hi)
            if ctx.quick:
                sizes = sizes[::2]  # one per octave in the quick form
            single_sizes = sizes[::2] if ctx.quick else sizes  # the model's α–β line is fitted over these: the whole range
            for kind in ("h2d-pinned", "d2h-pinned", "h2d-pageable", "d2h-pageable", "d2d"):
                for s in sizes:
                    yield Planned(NAME, f"{kind}-{s}", lambda b=b, kind=kind, s=s: _gpu_copy(ctx, b, kind, s, "stream"))
                for s in single_sizes:
                    yield Planned(NAME, f"{kind}-{s}-single", lambda b=b, kind=kind, s=s: _gpu_copy(ctx, b, kind, s, "single"))
            for s in sizes[::4] if ctx.quick else sizes[::2]:
                yield Planned(NAME, f"d2d-sm-{s}", lambda b=b, s=s: _gpu_copy(ctx, b, "d2d-sm", s, "stream"))
            yield Skip(NAME, "h2d-d2h-sm", "SM-kernel host<->device copies (nvbandwidth's *_memcpy_sm) need mapped pinned memory "
                                           "that a kernel reads; torch has no API for it, so only copy-engine H2D/D2H are measured")
            if 1024 * MiB not in sizes:  # the device check's 1 GiB copy (the full sweep already ends there)
                yield Planned(NAME, f"d2d-{1024 * MiB}-check", lambda b=b: _gpu_copy(ctx, b, "d2d", 1024 * MiB))
            yield Planned(NAME, "page-h2d-chunks", lambda b=b: _chunk_cases(ctx, b, _gpu_chunk_factory(b)))
            yield Planned(NAME, "bidir", lambda b=b: _gpu_bidir(ctx, b, 256 * MiB))
            yield Planned(NAME, "overlap", lambda b=b: _gpu_overlap(ctx, b))
            if b.module.cuda.device_count() < 2:
                yield Skip(NAME, "peer", f"peer copies need two GPUs; {b.module.cuda.device_count()} visible")
            else:
                for s in sizes:
                    yield Planned(NAME, f"peer-{s}", lambda b=b, s=s: _gpu_copy(ctx, b, "peer", s, "stream"))
                for s in single_sizes:
                    yield Planned(NAME, f"peer-{s}-single", lambda b=b, s=s: _gpu_copy(ctx, b, "peer", s, "single"))
            continue
        hi = 16 * MiB if ctx.quick else 1024 * MiB
        sizes = sizes_two_per_octave(4 * KiB, hi)
        if ctx.quick:
            sizes = sizes[::2]
        for s in sizes:
            yield Planned(NAME, f"memcpy-{s}", lambda b=b, s=s: _cpu_copy_case(ctx, b, s))
        yield Planned(NAME, "page-chunks", lambda b=b: _chunk_cases(ctx, b, _cpu_chunk_factory(b)))
        if b.name == "numpy":
            shm_sizes = [64 * KiB, 4 * MiB] if ctx.quick else [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB]
            yield Planned(NAME, "shm-process", lambda b=b, ss=shm_sizes: _shm_cases(ctx, b, ss))
        else:
            yield Planned(NAME, "copy-overlap-gemm", lambda b=b: _cpu_overlap(ctx, b))
