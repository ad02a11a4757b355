"""A decoder-only transformer forward pass with random weights (torch), built from a ModelSpec.

RMSNorm, GQA attention with rotary positions (scaled_dot_product_attention, causal for prefill,
over a KV cache for decode), SwiGLU FFN, LM head. Nothing is downloaded: weights are drawn from
a seeded generator. Every step reads static inputs (token ids, positions, queries) made once per
shape and kept (`inputs`), so a step launches no host→device copy and can be captured into a CUDA
graph (microbench.graph_step) the way engines replay decode steps. Its work is counted by the analytical model's own accounting
(harness.model.forward.prefill_work / decode_step_work), so a measured time can be held
against the model's roofline directly. Dense GQA models only (the MoE expert path is the moe suite).
"""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError
from harness.specs.models import ModelSpec

# a configuration small enough for a CPU forward pass in well under a second
TINY = ModelSpec(
    name="tiny-gqa", n_layers=4, hidden_size=512, n_heads=8, n_kv_heads=2, head_dim=64,
    intermediate_size=1536, vocab_size=8192, source="harness test configuration (Qwen3-like GQA, 4 layers)",
)


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
        xf = x.float()
        return (xf * self.t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def _rope(self, x: Any, pos: Any) -> Any:
        cos, sin = self.cos[pos], self.sin[pos]  # [L, d] or [B, 1, d]
        half = x.shape[-1] // 2
        rot = self.t.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

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
        if batch > self.max_batch or context > self.max_context:
            raise HarnessError(f"decode step batch={batch}, context={context} exceeds the allocation ({self.max_batch}, {self.max_context}).")
        ids, pos = self.inputs("decode", batch, context)
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
        q = self._inputs[key]
        with t.inference_mode():
            out = None
            for li in range(m.n_layers):
                out = F.scaled_dot_product_attention(q, self.k_cache[li][:batch, :, :context], self.v_cache[li][:batch, :, :context], enable_gqa=True)
            return out
