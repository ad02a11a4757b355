"""TensorRT-LLM's scheduler as a clock-agnostic twin: in-flight batching with a token budget and (optionally) chunked context.

TensorRT-LLM's batch manager forms each iteration in two passes (its capacity scheduler, then its micro-batch
scheduler), which the twin follows:

- **capacity** (`capacity_policy`): GUARANTEED_NO_EVICT, the default, starts a request only when the KV blocks
  of its whole sequence (prompt + max new tokens) can be reserved, so a full cache makes requests wait instead
  of evicting anyone; MAX_UTILIZATION allocates as tokens are computed and pauses (evicts) the most recently
  started request when the cache runs out (the twin recomputes it, as vLLM does).
- **micro-batch**: at most `max_batch_size` requests and `max_num_tokens` tokens per iteration, taking the
  active requests oldest first — a generation request costs one token, a context (prefill) request its whole
  prompt. Without chunked context (`enable_chunked_context` off, the default) a prompt that does not fit the
  tokens left waits for a later iteration, and a prompt longer than `max_num_tokens` is refused; with it the
  prompt is cut into chunks of whole KV blocks (`tokens_per_block`) that fit the budget. Context and
  generation requests share the iteration (in-flight batching); a prompt's first token comes with its last chunk.

Times come from any StepTimes source (harness.target.step_times); the mechanics are harness.target.
chunked_prefill's, with TensorRT-LLM's chunk rule and defaults (trtllm-serve: max_batch_size 2048,
max_num_tokens 8192, kv_cache free_gpu_memory_fraction 0.9, tokens_per_block 32, chunked context off).
Not modelled: speculative decoding, KV block reuse across requests, the overlap scheduler's one-iteration lag.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import HarnessError
from harness.target.chunked_prefill import ChunkedPrefillScheduler, ChunkedPrefillSettings, SchedRequest
from harness.target.step_times import StepTimes

TRTLLM_DEFAULT_MAX_BATCH_SIZE = 2048
TRTLLM_DEFAULT_MAX_NUM_TOKENS = 8192
TRTLLM_DEFAULT_TOKENS_PER_BLOCK = 32
CAPACITY_POLICIES = {"GUARANTEED_NO_EVICT": "reserve", "MAX_UTILIZATION": "on-demand"}


@dataclass(frozen=True)
class TrtllmSettings:
    max_batch_size: int = TRTLLM_DEFAULT_MAX_BATCH_SIZE
    max_num_tokens: int = TRTLLM_DEFAULT_MAX_NUM_TOKENS
    enable_chunked_context: bool = False
    tokens_per_block: int = TRTLLM_DEFAULT_TOKENS_PER_BLOCK
    capacity_policy: str = "GUARANTEED_NO_EVICT"
    kv_capacity_tokens: float | None = None  # None: unbounded
    max_seq_len: int | None = None
    assumptions: tuple[str, ...] = ()
    fast_forward: bool = False
    engine: str = "trtllm"

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_num_tokens", "tokens_per_block"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"trtllm twin setting {name} must be an integer >= 1, got {v!r}.")
        if self.capacity_policy not in CAPACITY_POLICIES:
            raise HarnessError(f"trtllm twin setting capacity_policy must be one of {', '.join(CAPACITY_POLICIES)}, "
                               f"got {self.capacity_policy!r}.")

    @property
    def max_num_seqs(self) -> int:  # the name the other twins use for the running-request limit
        return self.max_batch_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def as_chunked(self) -> ChunkedPrefillSettings:
        return ChunkedPrefillSettings("trtllm", self.max_batch_size, self.max_num_tokens, True, prefix_caching=False,
                                      max_model_len=self.max_seq_len, kv_capacity_tokens=self.kv_capacity_tokens,
                                      assumptions=self.assumptions, kv_policy=CAPACITY_POLICIES[self.capacity_policy],
                                      fast_forward=self.fast_forward)


class TrtllmScheduler(ChunkedPrefillScheduler):
    """In-flight batching with TensorRT-LLM's token budget and context chunking on a Timeline."""

    def __init__(self, settings: TrtllmSettings, step_times: StepTimes):
        self.trtllm = settings
        super().__init__(settings.as_chunked(), step_times)

    def info(self) -> dict[str, Any]:
        d = super().info()
        d["profile"] = "trtllm-scheduler"
        d["settings"] = self.trtllm.to_dict()
        return d

    def _chunk(self, q: SchedRequest, budget: int) -> int:
        left = q.prompt_target - q.done_prompt
        if left <= budget:
            return left
        if not self.trtllm.enable_chunked_context:
            return 0  # the whole context waits for an iteration with room for it
        block = self.trtllm.tokens_per_block
        return (budget // block) * block

    def _admit(self, budget: int, chunks: list[tuple[SchedRequest, int]]) -> int:
        s = self.trtllm
        if not s.enable_chunked_context:
            while self._waiting and self._waiting[0].prompt_target > s.max_num_tokens:
                q = self._waiting.popleft()
                self.prefill_stats.waiting -= 1
                q.r.rejected = (f"the prompt ({q.prompt_target} tokens) exceeds max_num_tokens {s.max_num_tokens} and chunked "
                                "context is off")
                q.r.stage = "done"
                self._on_done(q.r, self.tl.now_s)
        return super()._admit(budget, chunks)
