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
A source that states `batch_time_s(ForwardBatch)` (harness.model.gpu_step) is given the step's exact
work instead: the new tokens, the chunks' causal (query, key) pairs and the decode sequences' keys.
A prompt's first token is sampled in the step that processes its last chunk. Prefix caching reuses
prompt blocks (PREFIX_BLOCK_TOKENS) held in an LRU.

The KV cache (`kv_capacity_tokens`; None: unbounded) is held one of two ways (`kv_policy`):
"reserve" admits a request only when its prompt plus its whole output fits (SGLang reserves on
admission; TensorRT-LLM's GUARANTEED_NO_EVICT), so requests wait in the queue instead; "on-demand"
(vLLM) allocates as tokens are computed, admits while the next chunk fits, and when a decode step
would overflow preempts the most recently admitted running request, frees its KV and queues it
first again, to be recomputed (prompt + the tokens it already generated) when there is room.

`fast_forward` (simulated time only, used by `harness predict`): a stretch of decode-only steps in
which nothing can change the batch — no prompt waiting that could be admitted, no request finishing
— runs as one event, each step's time still computed at its own context; tokens of the stretch are
reported at its end. A request that arrives during a stretch cuts it at the first step boundary after
its arrival, where a step-by-step engine would first see it, so the result is the same as stepping.
Off for the real-time HTTP twin, which streams every token.
Not modelled: speculative decoding, CUDA-graph batch padding, swapping to host memory.
"""

from __future__ import annotations

import collections
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.target.chapter import PrefixCache
from harness.target.step_times import CachedStepTimes, StepTimes

try:  # the step's exact work, when the source can use it (harness.model.gpu_step.ForwardBatch)
    from harness.model.gpu_step import ForwardBatch
except ImportError:  # pragma: no cover - the model is part of the harness; kept optional for the twin's own tests
    ForwardBatch = None  # type: ignore[assignment,misc]
from harness.target.timeline import DoneFn, PoolStats, SimRequest, Timeline, TokensFn, emit_tokens

# defaults of the engines when a config leaves a field out (assumptions, stated in the twin's info)
VLLM_DEFAULT_MAX_NUM_SEQS = 256
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
SGLANG_DEFAULT_MAX_RUNNING_REQUESTS = 256
SGLANG_DEFAULT_CHUNKED_PREFILL_SIZE = 8192
KV_POLICIES = ("reserve", "on-demand")
STRETCH_GRID_TOKENS = 16  # a fast-forwarded step's context is read on this grid (the step times' own cache grid)


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
    kv_policy: str = "reserve"  # "reserve": prompt + whole output on admission; "on-demand": allocate, preempt on overflow
    fast_forward: bool = False  # decode-only stretches as one event (simulated time only)

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"{self.engine} twin setting {name} must be an integer >= 1, got {v!r}.")
        if self.kv_policy not in KV_POLICIES:
            raise HarnessError(f"{self.engine} twin setting kv_policy must be one of {', '.join(KV_POLICIES)}, got {self.kv_policy!r}.")
        if self.kv_capacity_tokens is not None and not self.kv_capacity_tokens > 0:
            raise HarnessError(f"{self.engine} twin setting kv_capacity_tokens must be > 0 tokens (or None: unbounded), "
                               f"got {self.kv_capacity_tokens!r}; the model's weights may leave no room for KV.")

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


class SchedRequest:
    __slots__ = ("r", "done_prompt", "prompt_target", "kv_tokens")

    def __init__(self, r: SimRequest):
        self.r, self.done_prompt = r, 0
        self.prompt_target = r.input_tokens  # tokens to prefill: the prompt, or prompt + generated after a preemption
        self.kv_tokens = 0.0  # KV held (on-demand) or reserved (reserve)


class ChunkedPrefillScheduler:
    """vLLM / SGLang continuous batching on a Timeline (the TensorRT-LLM twin, harness.target.trtllm, subclasses it)."""

    mode = "colocated"

    def __init__(self, settings: ChunkedPrefillSettings, step_times: StepTimes):
        self.settings = settings
        self.step_times = step_times if isinstance(step_times, CachedStepTimes) else CachedStepTimes(step_times)
        self._batch_time = getattr(step_times, "batch_time_s", None) if ForwardBatch is not None else None
        self.prefill_stats = PoolStats()
        self.decode_stats = self.prefill_stats
        self.link = None
        self.kv_capacity_tokens = float(settings.kv_capacity_tokens or 0.0)
        self.prefix = PrefixCache()
        self._waiting: collections.deque[SchedRequest] = collections.deque()
        self._prefilling: list[SchedRequest] = []
        self._running: list[SchedRequest] = []
        self._kv_used = 0.0
        self._busy = False
        self.steps = 0
        self.preemptions = 0
        self.kv_limited_steps = 0  # steps in which a waiting request was held back by KV capacity
        self.peak_running = 0
        self._stretch: tuple[int, float, Any, list[SchedRequest]] | None = None  # (generation, start, step ends, batch)
        self._stretch_gen = 0
        shared = getattr(step_times, "curve_cache", None)
        self._curves: dict[int, tuple[int, np.ndarray]] = shared if isinstance(shared, dict) else {}

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None:
        self.tl, self._on_tokens, self._on_done = timeline, on_tokens, on_done

    def info(self) -> dict[str, Any]:
        src = self.step_times.inner
        return {"simulated": True, "profile": f"{self.settings.engine}-scheduler", "mode": "colocated",
                "settings": self.settings.to_dict(), "step_times": src.to_dict() if hasattr(src, "to_dict") else type(src).__name__}

    def submit(self, req: SimRequest, now_s: float) -> None:
        req.arrival_s = now_s
        self.prefill_stats.waiting += 1
        self._waiting.append(SchedRequest(req))
        if not self._busy:
            self._step()
        elif self._stretch is not None:
            self._cut_stretch(now_s)

    # ---- KV accounting

    def _kv_need_on_admission(self, q: SchedRequest, first_chunk: int) -> float:
        r = q.r
        if self.settings.kv_policy == "reserve":
            return r.input_tokens + r.output_tokens
        return float(first_chunk)

    def _kv_fits(self, need: float) -> bool:
        cap = self.settings.kv_capacity_tokens
        return cap is None or self._kv_used + need <= cap or not (self._running or self._prefilling)

    def _hold(self, q: SchedRequest, tokens: float) -> None:
        q.kv_tokens += tokens
        self._kv_used += tokens

    def _release(self, q: SchedRequest) -> None:
        self._kv_used -= q.kv_tokens
        q.kv_tokens = 0.0

    # ---- policy points (TensorRT-LLM overrides them)

    def _chunk(self, q: SchedRequest, budget: int) -> int:
        """Prompt tokens of `q` to run in this step with `budget` tokens left (0: not this step)."""
        return min(budget, q.prompt_target - q.done_prompt)

    def _admit(self, budget: int, chunks: list[tuple[SchedRequest, int]]) -> int:
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
            fresh = q.done_prompt == 0 and q.prompt_target == r.input_tokens and r.emitted == 0
            cached = self.prefix.hit_tokens(r) if s.prefix_caching and fresh else 0
            k = self._chunk_from(q, cached, budget)
            if k <= 0:
                break
            if not self._kv_fits(self._kv_need_on_admission(q, cached + k)):
                self.kv_limited_steps += 1
                break
            self._waiting.popleft()
            st.waiting -= 1
            if fresh:
                r.cached_tokens = cached
                q.done_prompt = cached
                st.prefix_queries_tokens_total += r.input_tokens
                st.prefix_hits_tokens_total += cached
                st.prompt_tokens_total += r.input_tokens
            st.running += 1
            self._hold(q, self._kv_need_on_admission(q, q.done_prompt + k))
            r.stage = "prefill"
            self._prefilling.append(q)
            chunks.append((q, k))
            budget -= k
        return budget

    def _chunk_from(self, q: SchedRequest, done: int, budget: int) -> int:
        saved = q.done_prompt
        q.done_prompt = done
        try:
            return self._chunk(q, budget)
        finally:
            q.done_prompt = saved

    # ---- one engine step

    def _step(self) -> None:
        s = self.settings
        decode = [q for q in self._running if not q.r.cancelled]
        chunks: list[tuple[SchedRequest, int]] = []
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
                k = self._chunk(q, budget)
                if k <= 0:
                    continue
                chunks.append((q, k))
                budget -= k
            budget = self._admit(budget, chunks)
        if not chunks and not decode and not s.mixed and self._running:
            decode = list(self._running)  # nothing could be admitted: decode instead
        if s.kv_policy == "on-demand" and s.kv_capacity_tokens is not None:
            decode = self._make_room(decode, chunks)
        if not chunks and not decode:
            self._busy = False
            return
        self.peak_running = max(self.peak_running, len(self._running) + len(self._prefilling))
        self._busy = True
        if not chunks and s.fast_forward:
            ends = self._decode_stretch(decode)
            if len(ends) > 1:
                self._stretch_gen += 1
                self._stretch = (self._stretch_gen, self.tl.now_s, ends, decode)
                self.tl.at(self.tl.now_s + float(ends[-1]), self._post_stretch, decode, len(ends), self._stretch_gen)
                return
        dt = self._time(decode, chunks)
        self.steps += 1
        self.tl.at(self.tl.now_s + dt, self._post, decode, chunks)

    def _make_room(self, decode: list[SchedRequest], chunks: list[tuple[SchedRequest, int]]) -> list[SchedRequest]:
        """On-demand KV: the step needs one slot per decode token and the chunks' tokens beyond what admission held;
        while that overflows, preempt the most recently admitted running request (vLLM's recompute preemption)."""
        cap = float(self.settings.kv_capacity_tokens or 0.0)
        need = len(decode) + sum(max(0.0, q.done_prompt + k - q.kv_tokens) for q, k in chunks)
        while self._kv_used + need > cap and len(self._running) > 1:
            victim = self._running.pop()
            self._preempt(victim)
            if victim in decode:
                decode = [q for q in decode if q is not victim]
                need -= 1
        for q in decode:
            self._hold(q, 1.0)
        for q, k in chunks:
            extra = q.done_prompt + k - q.kv_tokens
            if extra > 0:
                self._hold(q, extra)
        return decode

    def _preempt(self, q: SchedRequest) -> None:
        r = q.r
        self.preemptions += 1
        self._release(q)
        q.done_prompt = 0
        q.prompt_target = r.input_tokens + r.emitted  # recompute everything it has, then keep generating
        r.stage = "queued"
        self.prefill_stats.running -= 1
        self.prefill_stats.waiting += 1
        self._waiting.appendleft(q)

    def _drop(self, q: SchedRequest) -> bool:
        self.prefill_stats.running -= 1
        self._release(q)
        return False

    def _forward(self, decode: list[SchedRequest], chunks: list[tuple[SchedRequest, int]]) -> Any:
        keys = sum(q.r.context_tokens + 1 for q in decode)
        pairs = 0.0
        for q, k in chunks:
            c = q.done_prompt
            pairs += k * c + k * (k + 1) / 2.0
        finishing = sum(1 for q, k in chunks if q.done_prompt + k >= q.prompt_target)
        return ForwardBatch(len(decode) + sum(k for _, k in chunks), len(decode) + finishing, pairs, float(keys),
                            len(decode), len(chunks))

    def _time(self, decode: list[SchedRequest], chunks: list[tuple[SchedRequest, int]]) -> float:
        if self._batch_time is not None:
            return self._batch_time(self._forward(decode, chunks))
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

    def _decode_stretch(self, decode: list[SchedRequest]) -> Any:
        """Cumulative end times (from now) of the decode-only steps that can run without a change of batch: until the
        first request finishes, or (on-demand KV) the cache would overflow. Each step's time is read at its own mean
        context (on the source's context grid) from a per-batch curve filled once."""
        if not decode:
            return []
        steps_max = min(q.r.output_tokens - q.r.emitted for q in decode)
        s = self.settings
        if s.kv_policy == "on-demand" and s.kv_capacity_tokens is not None:
            room = int((float(s.kv_capacity_tokens) - self._kv_used) // len(decode)) + 1  # this step's slots are held
            steps_max = min(steps_max, max(1, room))
        b = len(decode)
        ctx0 = sum(q.r.context_tokens for q in decode) / b
        g = STRETCH_GRID_TOKENS
        idx = np.rint((ctx0 + np.arange(steps_max)) / g).astype(np.int64)
        start, curve = self._curve(b, int(idx[0]), int(idx[-1]))
        return np.cumsum(curve[idx - start])

    def _curve(self, batch: int, first: int, last: int) -> tuple[int, np.ndarray]:
        """(start, seconds): decode step times at batch `batch` and context k·STRETCH_GRID_TOKENS for k in
        [start, start + len), covering [first, last]; filled on demand and shared through the source's
        `curve_cache` (a step model used by many instances fills each point once)."""
        start, c = self._curves.get(batch, (first, np.empty(0)))
        lo, hi = min(start, first), max(start + len(c), last + 1)
        if lo < start or hi > start + len(c):
            new = np.empty(hi - lo)
            step = self.step_times.decode_step_time_s
            for k in range(lo, hi):
                j = k - start
                new[k - lo] = c[j] if 0 <= j < len(c) else step(batch, max(1.0, float(k * STRETCH_GRID_TOKENS)))
            start, c = lo, new
            self._curves[batch] = (start, c)
        return start, c

    def _cut_stretch(self, now_s: float) -> None:
        """A request arrived during a stretch: end the stretch at the first step boundary at or after `now_s`."""
        assert self._stretch is not None
        gen, t0, ends, decode = self._stretch
        j = int(np.searchsorted(ends, now_s - t0, side="left"))  # ends[j] is the first boundary >= now
        if j >= len(ends) - 1:
            return
        self._stretch = None
        self._stretch_gen += 1
        self.tl.at(t0 + float(ends[j]), self._post_stretch, decode, j + 1, self._stretch_gen)

    def _post_stretch(self, decode: list[SchedRequest], steps: int, gen: int) -> None:
        if gen != self._stretch_gen:
            return  # cut short: a later event carries the stretch's end
        self._stretch = None
        self.steps += steps
        stats = self.prefill_stats
        live = [q for q in decode if not q.r.cancelled]
        if self.settings.kv_policy == "on-demand" and self.settings.kv_capacity_tokens is not None:
            for q in live:
                self._hold(q, steps - 1.0)  # the first step's slot was held by _make_room
        stats.generation_tokens_total += steps * len(live)
        done = emit_tokens([(q.r, min(steps, q.r.output_tokens - q.r.emitted)) for q in live], self.tl.now_s,
                           self._on_tokens, self._on_done)
        self._finish_done(done)
        self._step()

    def _post(self, decode: list[SchedRequest], chunks: list[tuple[SchedRequest, int]]) -> None:
        stats = self.prefill_stats
        items: list[tuple[SimRequest, int]] = []
        for q, k in chunks:
            q.done_prompt += k
            if q.done_prompt >= q.prompt_target:
                self._prefilling.remove(q)
                if q.r.emitted == 0:
                    self.prefix.insert(q.r)
                q.r.stage = "decode"
                self._running.append(q)
                items.append((q.r, 1))
        for q in decode:
            items.append((q.r, 1))
            stats.generation_tokens_total += 1
        done = emit_tokens(items, self.tl.now_s, self._on_tokens, self._on_done)
        self._finish_done(done)
        self._step()

    def _finish_done(self, done: list[SimRequest]) -> None:
        """Retire the running requests that finished (`done`) or were cancelled."""
        if not done and (self.settings.fast_forward or not any(q.r.cancelled for q in self._running)):
            return  # nothing finished (the simulated runs that fast-forward cancel nothing)
        stats = self.prefill_stats
        keep = []
        for q in self._running:
            r = q.r
            if r.cancelled or r.emitted >= r.output_tokens:
                stats.running -= 1
                stats.requests_finished_total += not r.cancelled
                self._release(q)
            else:
                keep.append(q)
        self._running = keep
