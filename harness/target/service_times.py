"""Service times the embedded target uses: prefill of one request and one batched decode step, per GPU type.

Chapter 9, §9.2.3: each stage takes max(FLOPs/(η_c·peak), bytes/(η_b·bandwidth)) (the roofline
lower bound with efficiency constants). Unlike the plan, which fixes one batch size and the mean
context, the target evaluates the step at the batch it is actually running and the batch's actual
mean context, so partial batches run faster, as on a real engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from harness.errors import HarnessError
from harness.model.forward import decode_step_work, prefill_work
from harness.model.kv import kv_bytes_per_token
from harness.model.stages import Efficiency
from harness.specs.gpus import GpuSpec
from harness.specs.models import ModelSpec

# The step time is evaluated on a context grid this coarse (tokens) so it can be cached; the
# error is below 0.1% of a step at the chapter's 8704-token mean context.
CONTEXT_GRID_TOKENS = 64


def roofline_s(flops: float, nbytes: float, gpu: GpuSpec, eff: Efficiency) -> float:
    """max(flops/(η_c·peak_bf16), bytes/(η_b·hbm_bandwidth)) in seconds (§9.2.3)."""
    return max(flops / (eff.compute * gpu.peak_bf16_flops_per_s), nbytes / (eff.bandwidth * gpu.hbm_bandwidth_bytes_per_s))


@dataclass(frozen=True)
class GpuServiceModel:
    """Stage times of one GPU type for one model, cached by (tokens) and (batch, context)."""

    gpu: GpuSpec
    model: ModelSpec
    efficiency: Efficiency = field(default_factory=Efficiency)
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_elem: float = 2.0

    def __post_init__(self) -> None:
        # per-instance caches (the dataclass is frozen, so set through object.__setattr__)
        object.__setattr__(self, "_prefill", lru_cache(maxsize=4096)(self._prefill_uncached))
        object.__setattr__(self, "_step", lru_cache(maxsize=16384)(self._step_uncached))

    def _prefill_uncached(self, new_tokens: int, cached_tokens: int) -> float:
        w = prefill_work(self.model, new_tokens, cached_tokens, self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return roofline_s(w.flops, w.bytes, self.gpu, self.efficiency)

    def _step_uncached(self, batch: int, context_tokens: int) -> float:
        w = decode_step_work(self.model, batch, float(context_tokens), self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return roofline_s(w.flops, w.bytes, self.gpu, self.efficiency)

    def prefill_s(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """Seconds to prefill `new_tokens` after `cached_tokens` of reused prefix (§9.2.3, §9.2.4)."""
        if new_tokens < 1:
            raise HarnessError(f"prefill needs at least one new token, got new_tokens={new_tokens!r}.")
        return self._prefill(int(new_tokens), int(cached_tokens))  # type: ignore[attr-defined]

    def decode_step_s(self, batch: int, mean_context_tokens: float) -> float:
        """Seconds of one decode call producing one token for each of `batch` running requests."""
        if batch < 1:
            raise HarnessError(f"decode batch must be >= 1, got {batch!r}.")
        grid = max(CONTEXT_GRID_TOKENS, int(round(mean_context_tokens / CONTEXT_GRID_TOKENS)) * CONTEXT_GRID_TOKENS)
        return self._step(int(batch), grid)  # type: ignore[attr-defined]

    def kv_bytes(self, tokens: float) -> float:
        return tokens * kv_bytes_per_token(self.model, self.kv_bytes_per_elem)
