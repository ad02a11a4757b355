"""A decoder-only transformer forward pass with random weights (torch), built from a ModelSpec.

RMSNorm, GQA attention with rotary positions (scaled_dot_product_attention, causal for prefill,
over a KV cache for decode), SwiGLU FFN, LM head. Nothing is downloaded: weights are drawn from
a seeded generator. Every step reads static inputs (token ids, positions, queries) made once per
shape and kept (`inputs`), so a step launches no host→device copy and can be captured into a CUDA
graph (microbench.graph_step) the way engines replay decode steps. Its work is counted by the analytical model's own accounting
(harness.model.forward.prefill_work / decode_step_work), so a measured time can be held
against the model's roofline directly. Dense GQA models only (the MoE expert path is the moe suite).

Two decode steps of the same math (docs/microbench-gpu.md, "Fused and eager-ops decode steps"):
- `step` / `decode_step` ("eager ops"): every elementwise op is its own kernel (RMSNorm in fp32 as
  pow/mean/add/rsqrt/mul/cast, RoPE as index/cat/neg/mul/add, the KV write as a copy, SiLU and the
  multiply apart): ~700 small kernels per Qwen3-8B step beside the GEMMs. A recorded baseline.
- `fused_step` / `fused_decode_step` ("fused (torch.compile inductor)"): one pure per-layer function
  (weights, caches, rotary tables and positions as tensor arguments) and the final norm + LM head
  compiled by torch.compile (inductor, dynamic=False, fullgraph), so the elementwise ops fuse as an
  engine's do (vLLM runs inductor plus fused custom ops); the GEMMs and SDPA stay the same library
  kernels, and the KV write stays an in-place `index_copy_` into the cache. `prepare_fused` compiles
  and warms a shape up (never inside a timed sample); when torch.compile is missing or fails it
  records why (`fused_reason`) and the fused step is the eager one.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any, Callable

from harness.errors import HarnessError
from harness.specs.models import ModelSpec
from microbench.params import OPS_EAGER, OPS_FUSED  # noqa: F401 - re-exported: the decode suite names its steps by them

# a configuration small enough for a CPU forward pass in well under a second
TINY = ModelSpec(
    name="tiny-gqa", n_layers=4, hidden_size=512, n_heads=8, n_kv_heads=2, head_dim=64,
    intermediate_size=1536, vocab_size=8192, source="harness test configuration (Qwen3-like GQA, 4 layers)",
)


RMS_EPS = 1e-6
FUSED_WARM_CALLS = 3  # calls of a freshly compiled shape before anyone times or captures it

# distinct (model, batch, context) shapes compiled in this process: dynamo keeps one cache entry per shape
# on the shared code objects of the fused functions, so its recompile limit must stay above this
_fused_shapes_compiled = 0


def rms_norm(torch: Any, x: Any, w: Any, eps: float = RMS_EPS) -> Any:
    """RMSNorm in fp32, cast back to x's dtype, times the weight (both steps' norm)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotary(torch: Any, x: Any, cos: Any, sin: Any) -> Any:
    """Rotary positions on x's last dimension, rotating halves, with the position's cos/sin rows (both steps' RoPE)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def fused_functions(torch: Any, n_heads: int, n_kv_heads: int, head_dim: int, eps: float = RMS_EPS) -> tuple[Callable, Callable]:
    """(layer, head): the pure functions of one decode layer and of the final norm + LM head, for torch.compile.

    layer(x, pos, n1, wqkv, wo, n2, wgu, wd, kc, vc, cos, sin) -> x: x [B, 1, H]; pos [1] (long) the position
    written and attended from (context - 1); kc/vc the layer's caches viewed as [B, kv_heads, context, d],
    written in place at `pos`; cos/sin the whole rotary tables [max_context, d]. Every tensor is an argument
    (no module attribute, no layer index), so one compiled graph serves every layer of a shape."""
    F = torch.nn.functional
    nh, nkv, d = n_heads, n_kv_heads, head_dim

    def rms(x: Any, w: Any) -> Any:
        return rms_norm(torch, x, w, eps)

    def rope(x: Any, cos: Any, sin: Any) -> Any:
        return rotary(torch, x, cos, sin)

    def layer(x: Any, pos: Any, n1: Any, wqkv: Any, wo: Any, n2: Any, wgu: Any, wd: Any, kc: Any, vc: Any,
              cos: Any, sin: Any) -> Any:
        b = x.shape[0]
        q, k, v = (rms(x, n1) @ wqkv).split([nh * d, nkv * d, nkv * d], -1)
        q = q.view(b, 1, nh, d).transpose(1, 2)
        k = k.view(b, 1, nkv, d).transpose(1, 2)
        v = v.view(b, 1, nkv, d).transpose(1, 2)
        c, s = cos[pos], sin[pos]
        q, k = rope(q, c, s), rope(k, c, s)
        kc.index_copy_(2, pos, k)  # in place: a graph replay writes the cache as the eager step does
        vc.index_copy_(2, pos, v)
        att = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
        x = x + att.transpose(1, 2).reshape(b, 1, nh * d) @ wo
        g, u = (rms(x, n2) @ wgu).chunk(2, -1)
        return x + (F.silu(g) * u) @ wd

    def head(x: Any, norm: Any, head_w: Any) -> Any:
        return rms(x[:, -1], norm) @ head_w

    return layer, head


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _compiled_graphs(torch: Any) -> int | None:
    """Graphs dynamo has compiled in this process so far (None where torch does not say)."""
    try:
        # lazy: optional (the torch extra): a host without it runs the numpy suites
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None


def _raise_recompile_limit(torch: Any, shapes: int) -> None:
    """Keep dynamo's per-code-object recompile limit above the shapes compiled, so no shape silently runs eager."""
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    if getattr(cfg, name) < shapes + 8:
        setattr(cfg, name, shapes + 8)


class RandomDecoder:
    def __init__(self, m: ModelSpec, torch: Any, device: str, dtype: Any, max_batch: int, max_context: int, seed: int = 0):
        if m.attention != "gqa" or m.is_moe:
            raise HarnessError(f"stage model {m.name!r}: only dense GQA models run here (got attention={m.attention}, moe={m.is_moe}).")
        self.m, self.t, self.device, self.dtype = m, torch, device, dtype
        self.max_batch, self.max_context = max_batch, max_context
        gen = torch.Generator(device=device).manual_seed(seed)
        H, q, kv, inter = m.hidden_size, m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim, m.intermediate_size

        def w(*shape: int) -> Any:
            return torch.randn(shape, generator=gen, device=device, dtype=dtype).mul_(0.02)

        self.embed = w(m.vocab_size, H)
        self.head = w(H, m.vocab_size)
        self.norm = torch.ones(H, device=device, dtype=dtype)
        self.layers = [
            {"n1": torch.ones(H, device=device, dtype=dtype), "wqkv": w(H, q + 2 * kv), "wo": w(q, H),
             "n2": torch.ones(H, device=device, dtype=dtype), "wgu": w(H, 2 * inter), "wd": w(inter, H)}
            for _ in range(m.n_layers)
        ]
        shape = (max_batch, m.n_kv_heads, max_context, m.head_dim)
        self.k_cache = [w(*shape) for _ in range(m.n_layers)]
        self.v_cache = [w(*shape) for _ in range(m.n_layers)]
        inv = 1.0 / (1e6 ** (torch.arange(0, m.head_dim, 2, device=device, dtype=torch.float32) / m.head_dim))
        ang = torch.outer(torch.arange(max_context, device=device, dtype=torch.float32), inv)
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype)
        self._gen = gen
        self._inputs: dict[tuple, Any] = {}
        self._fused: tuple[Callable, Callable] | None = None  # compiled (layer, head) once prepare_fused succeeded
        self.fused_reason: str | None = None  # why the fused step is the eager one (torch.compile missing or failed)
        self.fused_shapes: dict[tuple[int, int], dict[str, Any]] = {}  # (batch, context) -> compile facts

    def inputs(self, kind: str, batch: int, tokens: int) -> tuple[Any, Any]:
        """Static (ids, positions) of a step, drawn once per shape on the device and reused by every call.
        decode: ids [batch, 1], positions [1] = context - 1 (every request at the same position);
        prefill: ids [1, tokens], positions [tokens]."""
        key = (kind, batch, tokens)
        if key not in self._inputs:
            t = self.t
            if kind == "decode":
                ids = t.randint(0, self.m.vocab_size, (batch, 1), generator=self._gen, device=self.device)
                pos = t.full((1,), tokens - 1, dtype=t.long, device=self.device)
            else:
                ids = t.randint(0, self.m.vocab_size, (1, tokens), generator=self._gen, device=self.device)
                pos = t.arange(tokens, device=self.device)
            self._inputs[key] = (ids, pos)
        return self._inputs[key]

    def _rms(self, x: Any, w: Any) -> Any:
        return rms_norm(self.t, x, w)

    def _rope(self, x: Any, pos: Any) -> Any:
        return rotary(self.t, x, self.cos[pos], self.sin[pos])  # cos/sin rows [L, d] or [B, 1, d]

    def _decode_inputs(self, batch: int, context: int) -> tuple[Any, Any]:
        """The static decode inputs of (batch, context), once the shape is checked against the allocation."""
        if batch > self.max_batch or context > self.max_context:
            raise HarnessError(f"decode step batch={batch}, context={context} exceeds the allocation ({self.max_batch}, {self.max_context}).")
        return self.inputs("decode", batch, context)

    def _layer(self, x: Any, li: int, pos: Any, batch: int, new: int, ctx: int, causal: bool) -> Any:
        m, t, lw = self.m, self.t, self.layers[li]
        F = t.nn.functional
        d, nh, nkv = m.head_dim, m.n_heads, m.n_kv_heads
        qkv = self._rms(x, lw["n1"]) @ lw["wqkv"]
        q, k, v = qkv.split([nh * d, nkv * d, nkv * d], -1)
        q = q.view(batch, new, nh, d).transpose(1, 2)
        k = k.view(batch, new, nkv, d).transpose(1, 2)
        v = v.view(batch, new, nkv, d).transpose(1, 2)
        q, k = self._rope(q, pos), self._rope(k, pos)
        kc, vc = self.k_cache[li], self.v_cache[li]
        kc[:batch, :, ctx - new:ctx] = k
        vc[:batch, :, ctx - new:ctx] = v
        att = F.scaled_dot_product_attention(q, kc[:batch, :, :ctx], vc[:batch, :, :ctx], is_causal=causal, enable_gqa=True)
        x = x + att.transpose(1, 2).reshape(batch, new, nh * d) @ lw["wo"]
        g, u = (self._rms(x, lw["n2"]) @ lw["wgu"]).chunk(2, -1)
        return x + (F.silu(g) * u) @ lw["wd"]

    def prefill(self, tokens: int) -> Any:
        """One request of `tokens` new tokens (no cached prefix): logits of the last token."""
        if tokens > self.max_context:
            raise HarnessError(f"prefill of {tokens} tokens exceeds the allocated context {self.max_context}.")
        t = self.t
        ids, pos = self.inputs("prefill", 1, tokens)
        with t.inference_mode():
            x = self.embed[ids]
            for li in range(self.m.n_layers):
                x = self._layer(x, li, pos, 1, tokens, tokens, causal=True)
            return self._rms(x[:, -1], self.norm) @ self.head

    def decode_step(self, batch: int, context: int) -> Any:
        """One decode call: one new token for each of `batch` requests attending to `context` keys (the new one included)."""
        ids, pos = self._decode_inputs(batch, context)
        return self.step(ids, pos, batch, context)

    def step(self, ids: Any, pos: Any, batch: int, context: int) -> Any:
        """A decode step on given input tensors (already on the device): what a CUDA graph captures."""
        with self.t.inference_mode():
            x = self.embed[ids]
            for li in range(self.m.n_layers):
                x = self._layer(x, li, pos, batch, 1, context, causal=False)
            return self._rms(x[:, -1], self.norm) @ self.head

    def attention_only(self, batch: int, context: int) -> Any:
        """Decode attention alone: one query per request over `context` cached keys, every layer."""
        t, m = self.t, self.m
        F = t.nn.functional
        key = ("attention-q", batch, 1)
        if key not in self._inputs:
            self._inputs[key] = t.randn((batch, m.n_heads, 1, m.head_dim), generator=self._gen, device=self.device, dtype=self.dtype)
        q = self._inputs[key].to(self.dtype)  # no-op unless a with_dtype copy shares the inputs
        with t.inference_mode():
            out = None
            for li in range(m.n_layers):
                out = F.scaled_dot_product_attention(q, self.k_cache[li][:batch, :, :context], self.v_cache[li][:batch, :, :context], enable_gqa=True)
            return out

    def with_dtype(self, dtype: Any) -> "RandomDecoder":
        """A copy with the same weights, caches and static inputs cast to `dtype` (an fp32 reference of a bf16 decoder:
        in bf16 two orders of rounding differ by ~1 % of the logits per few layers, so accuracy is judged against it)."""
        d = object.__new__(RandomDecoder)
        d.__dict__.update(self.__dict__)
        d.dtype = dtype
        d.embed, d.head, d.norm = self.embed.to(dtype), self.head.to(dtype), self.norm.to(dtype)
        d.layers = [{k: v.to(dtype) for k, v in lw.items()} for lw in self.layers]
        d.k_cache = [c.to(dtype, copy=True) for c in self.k_cache]
        d.v_cache = [c.to(dtype, copy=True) for c in self.v_cache]
        d.cos, d.sin = self.cos.to(dtype), self.sin.to(dtype)
        d._inputs = self._inputs  # shared: both draw a shape's static inputs once, so they step on the same ids
        d._fused, d.fused_reason, d.fused_shapes = None, None, {}
        return d

    # ---------------------------------------------------------------- fused (torch.compile) decode step

    def _compile_unavailable(self) -> str | None:
        t = self.t
        if not callable(getattr(t, "compile", None)):
            return f"torch {getattr(t, '__version__', '?')} has no torch.compile (needs torch >= 2.0)"
        if str(self.device).startswith("cuda") and importlib.util.find_spec("triton") is None:
            return "triton is not installed: inductor needs it for CUDA kernels (pip install triton, matching torch)"
        return None

    def prepare_fused(self, batch: int, context: int, warm_calls: int = FUSED_WARM_CALLS) -> str | None:
        """Compile the fused step for (batch, context) and run it `warm_calls` times (compile and autotuning stay
        out of any timed sample, and a CUDA-graph capture then finds nothing left to compile).

        Returns None when the fused step is ready, else the reason it is not (kept in `fused_reason`); from
        then on `fused_step` runs the eager step. Never raises for a compile failure."""
        global _fused_shapes_compiled
        if self.fused_reason is not None:
            return self.fused_reason
        if (batch, context) in self.fused_shapes:
            return None
        if batch > self.max_batch or context > self.max_context:
            raise HarnessError(f"fused decode step batch={batch}, context={context} exceeds the allocation ({self.max_batch}, {self.max_context}).")
        t = self.t
        why = self._compile_unavailable()
        if why is not None:
            self.fused_reason = why
            return why
        graphs0 = _compiled_graphs(t)
        t0 = time.perf_counter()
        try:
            if self._fused is None:
                layer, head = fused_functions(t, self.m.n_heads, self.m.n_kv_heads, self.m.head_dim)
                self._fused = (t.compile(layer, dynamic=False, fullgraph=True), t.compile(head, dynamic=False, fullgraph=True))
            _raise_recompile_limit(t, _fused_shapes_compiled + 1)
            _fused_shapes_compiled += 1
            for _ in range(max(1, warm_calls)):
                self.fused_decode_step(batch, context)
            if str(self.device).startswith("cuda"):
                t.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - no compiler, no triton, an unsupported op: the suite goes on eagerly
            self._fused = None
            self.fused_reason = (f"torch.compile (inductor) failed ({_first_line(exc)}); the fused step falls back to "
                                 "the eager-ops step")
            return self.fused_reason
        graphs1 = _compiled_graphs(t)
        self.fused_shapes[(batch, context)] = {
            "fused_compile_and_warmup_s": time.perf_counter() - t0,
            "fused_graphs_compiled": None if graphs0 is None or graphs1 is None else graphs1 - graphs0,
        }
        return None

    def fused_decode_step(self, batch: int, context: int) -> Any:
        """The fused decode step on the static decode inputs of (batch, context); the eager step when not prepared."""
        ids, pos = self._decode_inputs(batch, context)
        return self.fused_step(ids, pos, batch, context)

    def fused_step(self, ids: Any, pos: Any, batch: int, context: int) -> Any:
        """`step` with the per-layer work in the compiled function (same math, same inputs, same cache writes)."""
        if self._fused is None:
            return self.step(ids, pos, batch, context)
        layer, head = self._fused
        with self.t.inference_mode():
            x = self.embed[ids]
            for li, lw in enumerate(self.layers):
                x = layer(x, pos, lw["n1"], lw["wqkv"], lw["wo"], lw["n2"], lw["wgu"], lw["wd"],
                          self.k_cache[li][:batch, :, :context], self.v_cache[li][:batch, :, :context], self.cos, self.sin)
            return head(x, self.norm, self.head)
