"""vLLM's and SGLang's schedulers as a clock-agnostic twin: continuous batching with chunked prefill and prefix caching.

One engine step (harness.target.timeline drives it in real or simulated time):

- **vLLM (V1 scheduler, `mixed = True`)**: a token budget of `max_num_batched_tokens` per step;
  every running request decodes one token first, the rest of the budget goes to prompt chunks of
  the requests being prefilled, then of waiting requests admitted FIFO while fewer than
  `max_num_seqs` run and their KV fits (`kv_capacity_tokens`); prefill and decode share the step.
- **SGLang (`mixed = False`, its default without --enable-mixed-chunk)**: a step is either a
  prefill batch (chunks up to `chunked_prefill_size` tokens, waiting requests admitted up to
  `max_running_requests`) or a decode batch of every running request; prefill goes first when
  anything waits.

Times come from a StepTimes source: `decode_step_time_s(n, mean context)` for a decode-only step,
`prefill_time_s(tokens, cached)` for a prefill-only step (several prompts' chunks: their token
sum), and for a mixed step the source's `mixed_step_time_s` when it states one, else
`max(decode step, prefill of all the step's tokens)` (one pass over the weights; an assumption).
A prompt's first token is sampled in the step that processes its last chunk. Prefix caching reuses
prompt blocks (PREFIX_BLOCK_TOKENS) held in an LRU. Not modelled: preemption and swapping when
the KV cache overflows (requests wait instead), speculative decoding, CUDA-graph batch padding.
"""

from __future__ import annotations

import collections
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import HarnessError
from harness.target.chapter import PrefixCache
from harness.target.step_times import CachedStepTimes, StepTimes
from harness.target.timeline import DoneFn, PoolStats, SimRequest, Timeline, TokensFn, emit_tokens

# defaults of the engines when a config leaves a field out (assumptions, stated in the twin's info)
VLLM_DEFAULT_MAX_NUM_SEQS = 256
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
SGLANG_DEFAULT_MAX_RUNNING_REQUESTS = 256
SGLANG_DEFAULT_CHUNKED_PREFILL_SIZE = 8192


@dataclass(frozen=True)
class ChunkedPrefillSettings:
    engine: str  # "vllm" | "sglang"
    max_num_seqs: int
    max_num_batched_tokens: int  # vLLM's token budget per step; SGLang's chunked_prefill_size
    mixed: bool  # prefill chunks share a step with the decode tokens
    prefix_caching: bool = True
    max_model_len: int | None = None
    kv_capacity_tokens: float | None = None  # None: unbounded (no KV pressure modelled)
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"{self.engine} twin setting {name} must be an integer >= 1, got {v!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def settings_from_vllm(o: Any, *, kv_capacity_tokens: float | None = None) -> ChunkedPrefillSettings:
    notes = []
    seqs = o.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS
    budget = o.max_num_batched_tokens or VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    if o.max_num_seqs is None:
        notes.append(f"vllm.max_num_seqs not set: assumed vLLM's default {VLLM_DEFAULT_MAX_NUM_SEQS}")
    if o.max_num_batched_tokens is None:
        notes.append(f"vllm.max_num_batched_tokens not set: assumed {VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS}")
    if o.enable_chunked_prefill is False:
        budget = max(budget, o.max_model_len or budget)
        notes.append("chunked prefill off: a prompt is prefilled whole")
    return ChunkedPrefillSettings("vllm", seqs, budget, True, o.enable_prefix_caching is not False, o.max_model_len,
                                  kv_capacity_tokens, tuple(notes))


def settings_from_sglang(o: Any, *, kv_capacity_tokens: float | None = None) -> ChunkedPrefillSettings:
    notes = []
    seqs = o.max_running_requests or SGLANG_DEFAULT_MAX_RUNNING_REQUESTS
    size = o.chunked_prefill_size
    if o.max_running_requests is None:
        notes.append(f"sglang.max_running_requests not set: assumed {SGLANG_DEFAULT_MAX_RUNNING_REQUESTS}")
    if size is None:
        size = SGLANG_DEFAULT_CHUNKED_PREFILL_SIZE
        notes.append(f"sglang.chunked_prefill_size not set: assumed {SGLANG_DEFAULT_CHUNKED_PREFILL_SIZE}")
    elif size == -1:
        size = o.context_length or 1 << 20
        notes.append("chunked prefill off (-1): a prompt is prefilled whole")
    return ChunkedPrefillSettings("sglang", seqs, int(size), False, not o.disable_radix_cache, o.context_length,
                                  kv_capacity_tokens, tuple(notes))


class _Req:
    __slots__ = ("r", "done_prompt")

    def __init__(self, r: SimRequest):
        self.r, self.done_prompt = r, 0


class ChunkedPrefillScheduler:
    """vLLM / SGLang continuous batching on a Timeline."""

    mode = "colocated"

    def __init__(self, settings: ChunkedPrefillSettings, step_times: StepTimes):
        self.settings = settings
        self.step_times = step_times if isinstance(step_times, CachedStepTimes) else CachedStepTimes(step_times)
        self.prefill_stats = PoolStats()
        self.decode_stats = self.prefill_stats
        self.link = None
        self.kv_capacity_tokens = float(settings.kv_capacity_tokens or 0.0)
        self.prefix = PrefixCache()
        self._waiting: collections.deque[_Req] = collections.deque()
        self._prefilling: list[_Req] = []
        self._running: list[_Req] = []
        self._kv_used = 0.0
        self._busy = False
        self.steps = 0

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None:
        self.tl, self._on_tokens, self._on_done = timeline, on_tokens, on_done

    def info(self) -> dict[str, Any]:
        src = self.step_times.inner
        return {"simulated": True, "profile": f"{self.settings.engine}-scheduler", "mode": "colocated",
                "settings": self.settings.to_dict(), "step_times": src.to_dict() if hasattr(src, "to_dict") else type(src).__name__}

    def submit(self, req: SimRequest, now_s: float) -> None:
        req.arrival_s = now_s
        self.prefill_stats.waiting += 1
        self._waiting.append(_Req(req))
        if not self._busy:
            self._step()

    def _kv_fits(self, r: SimRequest) -> bool:
        cap = self.settings.kv_capacity_tokens
        return cap is None or self._kv_used + r.input_tokens + r.output_tokens <= cap or not (self._running or self._prefilling)

    def _admit(self, budget: int, chunks: list[tuple[_Req, int]]) -> int:
        st = self.prefill_stats
        s = self.settings
        while self._waiting and budget > 0 and len(self._running) + len(self._prefilling) < s.max_num_seqs:
            q = self._waiting[0]
            r = q.r
            if r.cancelled:
                self._waiting.popleft()
                st.waiting -= 1
                continue
            if s.max_model_len and r.input_tokens >= s.max_model_len:
                self._waiting.popleft()
                st.waiting -= 1
                r.rejected = f"the prompt ({r.input_tokens} tokens) exceeds max_model_len {s.max_model_len}"
                r.stage = "done"
                self._on_done(r, self.tl.now_s)
                continue
            if not self._kv_fits(r):
                break
            self._waiting.popleft()
            st.waiting -= 1
            r.cached_tokens = self.prefix.hit_tokens(r) if s.prefix_caching else 0
            q.done_prompt = r.cached_tokens
            st.prefix_queries_tokens_total += r.input_tokens
            st.prefix_hits_tokens_total += r.cached_tokens
            st.prompt_tokens_total += r.input_tokens
            st.running += 1
            self._kv_used += r.input_tokens + r.output_tokens
            r.stage = "prefill"
            self._prefilling.append(q)
            k = min(budget, r.input_tokens - q.done_prompt)
            chunks.append((q, k))
            budget -= k
        return budget

    def _step(self) -> None:
        s = self.settings
        decode = [q for q in self._running if not q.r.cancelled]
        chunks: list[tuple[_Req, int]] = []
        budget = s.max_num_batched_tokens
        want_prefill = bool(self._prefilling or self._waiting)
        if s.mixed or not want_prefill:
            decode = decode[:budget]
            budget -= len(decode)
        else:
            decode = []  # SGLang: a prefill batch runs alone
        if s.mixed or want_prefill:
            self._prefilling = [q for q in self._prefilling if not q.r.cancelled or self._drop(q)]
            for q in self._prefilling:
                if budget <= 0:
                    break
                k = min(budget, q.r.input_tokens - q.done_prompt)
                chunks.append((q, k))
                budget -= k
            budget = self._admit(budget, chunks)
        if not chunks and not decode and not s.mixed and self._running:
            decode = list(self._running)  # nothing could be admitted: decode instead
        if not chunks and not decode:
            self._busy = False
            return
        dt = self._time(decode, chunks)
        self.steps += 1
        self._busy = True
        self.tl.at(self.tl.now_s + dt, self._post, decode, chunks)

    def _drop(self, q: _Req) -> bool:
        self.prefill_stats.running -= 1
        self._kv_used -= q.r.input_tokens + q.r.output_tokens
        return False

    def _time(self, decode: list[_Req], chunks: list[tuple[_Req, int]]) -> float:
        st = self.step_times
        if not chunks:
            return st.decode_step_time_s(len(decode), sum(q.r.context_tokens for q in decode) / len(decode))
        n_p = sum(k for _, k in chunks)
        cached = chunks[0][0].done_prompt if len(chunks) == 1 else 0
        if not decode:
            return st.prefill_time_s(n_p, cached)
        ctx = sum(q.r.context_tokens for q in decode) / len(decode)
        mixed = getattr(st, "mixed_step_time_s", None)
        if mixed is not None:
            return mixed(len(decode), ctx, n_p, cached)
        return max(st.decode_step_time_s(len(decode), ctx), st.prefill_time_s(n_p + len(decode), cached))

    def _post(self, decode: list[_Req], chunks: list[tuple[_Req, int]]) -> None:
        stats = self.prefill_stats
        items: list[tuple[SimRequest, int]] = []
        for q, k in chunks:
            q.done_prompt += k
            if q.done_prompt >= q.r.input_tokens:
                self._prefilling.remove(q)
                self.prefix.insert(q.r)
                q.r.stage = "decode"
                self._running.append(q)
                items.append((q.r, 1))
        for q in decode:
            items.append((q.r, 1))
            stats.generation_tokens_total += 1
        emit_tokens(items, self.tl.now_s, self._on_tokens, self._on_done)
        keep = []
        for q in self._running:
            r = q.r
            if r.cancelled or r.emitted >= r.output_tokens:
                stats.running -= 1
                stats.requests_finished_total += not r.cancelled
                self._kv_used -= r.input_tokens + r.output_tokens
            else:
                keep.append(q)
        self._running = keep
        self._step()
