"""offload suite: host-offloaded KV read layer by layer while the new tokens compute, against the §9.5.2 model.

Chapter 9, §9.5.2 (CachedAttention, Fig. 9-32 – 9-34) and Chapter 19, §19.5 (Hugging Face's
OffloadedCache keeps only the current layer's KV on the GPU and prefetches the next one while the
current one computes): with the history of n layers in host memory, the model predicts from the
measured whole-read time T_read and whole-compute time T_new
    read-then-compute  T = T_read + T_new
    per-layer prefetch  layer i computes once read and after layer i−1 (harness.model.kv_prefetch.layer_pipeline)
    p layers pre-loaded the same with layers < p already resident (the smallest p that hides the read)
and the suite measures the three schedules for real and records measured / predicted.

Each layer's compute is that layer's work for the new tokens on top of the fetched prefix: QKV
projection, attention of the new queries over the fetched K and V (so the compute really needs the
read), output projection and the SwiGLU FFN. GPU: Qwen3-8B geometry, a 8192-token prefix (32 MiB per
layer, the chapter's figure) in pinned host memory, copies on a second stream with one event per
layer, 256 new tokens; CPU (a stand-in): the tiny geometry over 8 layers, the "host" copy a memcpy in a
helper thread with one threading.Event per layer (the copy shares the cores and memory bus with
the compute, so the overlap is worse than on a GPU, which the ratio shows).
Counted work: bytes read from the host (n·per-layer KV) and the compute's FLOPs (2 per multiply-add).
Peaks: the host reads against the PCIe link's per-direction peak of the device's own link
(microbench.gpu_link), the compute against the GPU's FLOP/s peak.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from harness.model import kv_prefetch
from harness.specs.models import ModelSpec, get_model
from microbench.backends import Backend
from microbench.case import CaseResult, Peak, Skip, Work
from microbench.suite import Item, Planned, SuiteContext
from microbench.transfer import pcie_peak
from microbench.transformer import TINY

NAME = "offload"
DESCRIPTION = "host-offloaded KV, layer-wise prefetch vs read-then-compute, measured against the §9.5.2 pipeline model"


class OffloadBench:
    """Host-resident per-layer KV, device buffers, per-layer weights, and the three schedules as thunks."""

    def __init__(self, b: Backend, m: ModelSpec, layers: int, prefix: int, new: int, dtype: Any, seed: int):
        t = self.t = b.module
        self.b, self.m, self.L, self.prefix, self.new = b, m, layers, prefix, new
        dev = b.device
        g = t.Generator(device="cpu").manual_seed(seed)
        kv_shape = (2, m.n_kv_heads, prefix, m.head_dim)
        pin = b.is_cuda
        self.host = [t.randn(kv_shape, generator=g, dtype=t.float32).to(dtype) for _ in range(layers)]
        if pin:
            self.host = [h.pin_memory() for h in self.host]
        self.dev_kv = [t.empty(kv_shape, dtype=dtype, device=dev) for _ in range(layers)]
        H, q, kv, inter = m.hidden_size, m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim, m.intermediate_size
        gd = t.Generator(device=dev).manual_seed(seed + 1)

        def w(*shape: int) -> Any:
            return t.randn(shape, generator=gd, device=dev, dtype=dtype).mul_(0.02)

        self.w = [{"qkv": w(H, q + 2 * kv), "o": w(q, H), "gu": w(H, 2 * inter), "d": w(inter, H)} for _ in range(layers)]
        self.x = w(new, H)
        self.layer_bytes = float(self.host[0].numel() * self.host[0].element_size())
        self.copy_stream = t.cuda.Stream() if b.is_cuda else None

    def layer_flops(self) -> float:
        m, n, P = self.m, self.new, self.prefix
        H, q, kv, inter = m.hidden_size, m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim, m.intermediate_size
        linear = 2.0 * n * (H * (q + 2 * kv) + q * H + H * 2 * inter + inter * H)
        attention = 4.0 * n * P * m.n_heads * m.head_dim  # QK^T and PV over the fetched prefix
        return linear + attention

    def _compute_layer(self, i: int, x: Any) -> Any:
        t, m, lw = self.t, self.m, self.w[i]
        F = t.nn.functional
        nh, nkv, hd, n = m.n_heads, m.n_kv_heads, m.head_dim, self.new
        qkv = x @ lw["qkv"]
        qq = qkv[:, : nh * hd].view(1, n, nh, hd).transpose(1, 2)
        kv = self.dev_kv[i]
        att = F.scaled_dot_product_attention(qq, kv[0:1], kv[1:2], enable_gqa=True)
        x = x + att.transpose(1, 2).reshape(n, nh * hd) @ lw["o"]
        gg, u = (x @ lw["gu"]).chunk(2, -1)
        return x + (F.silu(gg) * u) @ lw["d"]

    # -- the parts, each timed alone --
    def read_all(self) -> None:
        for i in range(self.L):
            self.dev_kv[i].copy_(self.host[i], non_blocking=self.b.is_cuda)

    def compute_all(self) -> Any:
        x = self.x
        with self.t.inference_mode():
            for i in range(self.L):
                x = self._compute_layer(i, x)
        return x

    def read_then_compute(self) -> Any:
        self.read_all()
        return self.compute_all()

    def pipelined(self, preloaded: int) -> Any:
        """Layers < preloaded are already on the device (not read here); the rest are read in order on a
        second stream (GPU) or thread (CPU) while layer i computes as soon as its read is done."""
        t, L = self.t, self.L
        x = self.x
        if self.b.is_cuda:
            cur = t.cuda.current_stream()
            events = [None] * L
            self.copy_stream.wait_stream(cur)
            with t.cuda.stream(self.copy_stream):
                for i in range(preloaded, L):
                    self.dev_kv[i].copy_(self.host[i], non_blocking=True)
                    ev = t.cuda.Event()
                    ev.record()
                    events[i] = ev
            with t.inference_mode():
                for i in range(L):
                    if events[i] is not None:
                        cur.wait_event(events[i])
                    x = self._compute_layer(i, x)
            return x
        ready = [threading.Event() for _ in range(L)]
        for i in range(preloaded):
            ready[i].set()

        def reader() -> None:
            for i in range(preloaded, L):
                self.dev_kv[i].copy_(self.host[i])
                ready[i].set()

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        with t.inference_mode():
            for i in range(L):
                ready[i].wait()
                x = self._compute_layer(i, x)
        th.join()
        return x


def plan_for(ctx: SuiteContext, b: Backend) -> tuple[ModelSpec, str, int, int, int]:
    if b.is_cuda:
        m = get_model(ctx.options.get("model", "qwen3-8b"))
        return m, "bf16", m.n_layers, 8192, 256
    return TINY, "fp32", 8, (1024 if ctx.quick else 4096), 32


def run(ctx: SuiteContext, b: Backend) -> list[CaseResult]:
    m, dtype, L, prefix, new = plan_for(ctx, b)
    bench = OffloadBench(b, m, L, prefix, new, b.dtype_of(dtype), ctx.seed)
    read_bytes = bench.layer_bytes * L
    flops = bench.layer_flops() * L
    pol = ctx.policy
    t_read = b.time(bench.read_all, pol, allow_graph=False)
    t_comp = b.time(bench.compute_all, pol, allow_graph=False)
    R, C = t_read.stats.median_s, t_comp.stats.median_s
    p_min = kv_prefetch.min_preloaded_layers(L, R, C)
    p = p_min if 0 < p_min < L else max(1, L // 3)
    preds = {
        "read-then-compute": kv_prefetch.read_then_compute(L, R, C),
        "per-layer": kv_prefetch.layer_pipeline(L, R, C, 0),
        f"preloaded-{p}": kv_prefetch.layer_pipeline(L, R, C, p),
    }
    thunks = {"read-then-compute": bench.read_then_compute, "per-layer": lambda: bench.pipelined(0),
              f"preloaded-{p}": lambda: bench.pipelined(p)}
    base = {"model": m.name, "layers": L, "prefix_tokens": prefix, "new_tokens": new, "layer_kv_bytes": bench.layer_bytes,
            "read_s": R, "compute_s": C, "min_preloaded_layers_model": p_min,
            "buffer_bytes_model": kv_prefetch.prefetch_buffer_bytes(read_bytes / R, R, C),
            "host_memory": "pinned" if b.is_cuda else "pageable (CPU stand-in: memcpy in a helper thread)"}
    read_peak, mixed_peak = offload_peaks(b, dtype)
    out = [
        ctx.result(NAME, f"{m.name}-read-L{L}-p{prefix}", b, dtype, {**base, "schedule": "read-only"}, Work(useful_bytes=read_bytes), t_read,
                   read_peak),
        ctx.result(NAME, f"{m.name}-compute-L{L}-n{new}", b, dtype, {**base, "schedule": "compute-only"}, Work(useful_flops=flops), t_comp),
    ]
    for name, fn in thunks.items():
        meas = b.time(fn, pol, allow_graph=False)
        pr = preds[name]
        preloaded = pr.preloaded_layers
        work = Work(useful_flops=flops, useful_bytes=bench.layer_bytes * (L - preloaded))
        out.append(ctx.result(NAME, f"{m.name}-{name}-L{L}", b, dtype,
                              {**base, "schedule": name, "preloaded_layers": preloaded, "predicted_s": pr.total_s,
                               "predicted_bound": pr.bound, "measured_over_predicted": meas.stats.median_s / pr.total_s},
                              work, meas, mixed_peak,
                              notes=(f"model {pr.total_s * 1e3:.3g} ms ({pr.bound}-bound) from the measured read and compute",)))
    return out


def offload_peaks(b: Backend, dtype: str) -> tuple[Peak, Peak]:
    """(read peak, schedule peak). GPU: the host reads cross PCIe, so their bytes are judged against the PCIe
    link's per-direction peak (not HBM: a 55 GB/s read would otherwise show ~1 % MBU); the schedules' FLOPs
    against the GPU's compute peak. CPU stand-in: the host's own peaks."""
    dev = b.peak(dtype)
    if not b.is_cuda:
        return dev, dev

    link = pcie_peak(b)
    return (Peak(None, link.bytes_per_s, link.source),
            Peak(dev.flops_per_s, link.bytes_per_s, f"FLOP/s: {dev.source}; bytes (host reads): {link.source}"))


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, b.label, "the offload benchmark uses torch streams/threads and attention; numpy has neither")
            continue
        if not b.is_cuda:
            yield Skip(NAME, f"{b.label}-pinned-h2d", "pinned host-to-GPU copies need a GPU; this CPU run is a memcpy-thread stand-in")
        yield Planned(NAME, f"prefetch-{b.label}", lambda b=b: run(ctx, b))
