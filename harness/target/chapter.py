"""The chapter's deployment as a scheduler: FIFO pools, prefill, shared KV link, batched decode (clock-agnostic).

PD mode (Chapter 9, §9.2): one FIFO queue per pool; each P GPU serves one prefill at a time for
the roofline time of the request's new tokens (a reused prefix is not recomputed, §9.2.4); the KV
state (V_KV = tokens·bytes_per_token, §9.2.2) then crosses the link, whose bandwidth is shared
equally by the transfers in flight (T ≥ α + V/B); the first token is streamed when the state has
arrived; D GPUs run continuous batching of up to decode_batch requests, one token per running
request per step, the step taking the roofline time at the running batch and its mean context.
Colocated mode: each GPU admits new requests between decode steps and prefills them unchunked,
stalling its running batch (§9.2.3). For `startup_s` after the first request nothing is served (§9.6.1).
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from harness.target.deployment import EmulatedDeployment
from harness.target.timeline import (
    PREFIX_BLOCK_TOKENS, PREFIX_CACHE_BLOCKS, DoneFn, PoolStats, SimRequest, Timeline, TokensFn, emit_tokens,
)


class SharedLink:
    """Fluid link: n transfers in flight each progress at B/n (processor sharing), plus α per transfer."""

    def __init__(self, timeline: Timeline, bandwidth_bytes_per_s: float, startup_latency_s: float):
        self.tl = timeline
        self.bandwidth = bandwidth_bytes_per_s
        self.alpha = startup_latency_s
        self._active: dict[int, list] = {}  # id -> [remaining bytes, done callback]
        self._ids = 0
        self._gen = 0
        self._last_s = 0.0
        self.bytes_total = 0.0
        self.transfers_total = 0

    @property
    def in_flight(self) -> int:
        return len(self._active)

    def _advance(self, now_s: float) -> None:
        if self._active and now_s > self._last_s:
            done_bytes = (now_s - self._last_s) * self.bandwidth / len(self._active)
            for v in self._active.values():
                v[0] -= done_bytes
        self._last_s = max(self._last_s, now_s)

    def transfer(self, nbytes: float, start_s: float, done: Callable[[float], None]) -> None:
        """Carry `nbytes` starting at simulated `start_s`; `done(t)` is called at the completion instant."""
        self.tl.at(start_s + self.alpha, self._begin, float(nbytes), done)

    def _begin(self, nbytes: float, done: Callable[[float], None]) -> None:
        self._advance(self.tl.now_s)
        self._ids += 1
        self._active[self._ids] = [nbytes, done]
        self.bytes_total += nbytes
        self.transfers_total += 1
        self._reschedule()

    def _reschedule(self) -> None:
        self._gen += 1
        if self._active:
            n = len(self._active)
            t_next = self._last_s + max(0.0, min(v[0] for v in self._active.values())) * n / self.bandwidth
            self.tl.at(t_next, self._complete, self._gen)

    def _complete(self, gen: int) -> None:
        if gen != self._gen:  # a transfer joined since: the shares were recomputed
            return
        now = self.tl.now_s
        self._advance(now)
        for k, (rem, done) in list(self._active.items()):
            if rem <= 1.0:  # bytes; float residue of the fluid model
                del self._active[k]
                done(now)
        self._reschedule()


class PrefixCache:
    """LRU set of prompt block hashes (blocks of PREFIX_BLOCK_TOKENS) held by the P pool."""

    def __init__(self, capacity_blocks: int = PREFIX_CACHE_BLOCKS):
        self.capacity = capacity_blocks
        self._blocks: collections.OrderedDict[int, None] = collections.OrderedDict()

    def hit_tokens(self, req: SimRequest) -> int:
        n = 0
        for h in req.block_hashes:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            n += 1
        return min(n * PREFIX_BLOCK_TOKENS, req.input_tokens - 1)

    def insert(self, req: SimRequest) -> None:
        for h in req.block_hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)


class _Worker:
    __slots__ = ("gpu", "svc", "busy", "running")

    def __init__(self, gpu: str, svc: Any):
        self.gpu, self.svc, self.busy = gpu, svc, False
        self.running: list[SimRequest] = []


class ChapterScheduler:
    """The emulated deployment of a scenario (chapter mode); driven by any Timeline driver."""

    def __init__(self, dep: EmulatedDeployment):
        self.dep = dep
        self.mode = dep.mode
        self.prefill_stats = PoolStats()
        self.decode_stats = PoolStats()
        self.prefix = PrefixCache()
        self.link: SharedLink | None = None
        self.ready_at_s: float | None = None  # set by the first request: startup_s counts from it
        self.kv_capacity_tokens = self._kv_capacity_tokens()
        self._pq: collections.deque[SimRequest] = collections.deque()
        self._dq: collections.deque[SimRequest] = collections.deque()
        if dep.mode == "pd":
            self._p = [_Worker(g, dep.services[g]) for g in dep.prefill_gpus]
            self._d = [_Worker(g, dep.services[g]) for g in dep.decode_gpus]
        else:
            self._p, self._d = [], []
        self._c = [_Worker(g, dep.services[g]) for g in dep.colocated_gpus]
        # idle workers in the order they became idle (the longest-idle one takes the next request, as a FIFO of waiters)
        self._p_idle: collections.deque[_Worker] = collections.deque(self._p)
        self._c_idle: collections.deque[_Worker] = collections.deque(self._c)

    def _kv_capacity_tokens(self) -> float:
        from harness.model.forward import param_counts  # noqa: PLC0415

        gpus = self.dep.decode_gpus if self.dep.mode == "pd" else self.dep.colocated_gpus
        total = 0.0
        for g in gpus:
            svc = self.dep.services[g]
            weights = param_counts(svc.model).total * svc.weight_bytes_per_param
            total += max(0.0, svc.gpu.hbm_capacity_bytes - weights) / svc.kv_bytes(1)
        return total

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None:
        self.tl, self._on_tokens, self._on_done = timeline, on_tokens, on_done
        if self.dep.mode == "pd" and self.dep.link_bandwidth_bytes_per_s:
            self.link = SharedLink(timeline, self.dep.link_bandwidth_bytes_per_s, self.dep.link_startup_latency_s)

    def info(self) -> dict[str, Any]:
        return self.dep.to_dict()

    # -- intake -------------------------------------------------------------------------------
    def submit(self, req: SimRequest, now_s: float) -> None:
        req.arrival_s = now_s
        if self.ready_at_s is None:
            # §9.6.1: the service becomes ready startup_s after the first request arrives, so the backlog at
            # readiness is λ·T_s however long the client took to start
            self.ready_at_s = now_s + self.dep.startup_s
            if self.dep.startup_s > 0:
                self.tl.at(self.ready_at_s, self._kick)
        self.prefill_stats.waiting += 1
        self._pq.append(req)
        self._kick()

    def _ready(self) -> bool:
        return self.ready_at_s is not None and self.tl.now_s >= self.ready_at_s

    def _kick(self) -> None:
        if not self._ready():
            return
        if self.dep.mode == "pd":
            while self._p_idle and self._pq:
                self._start_prefill(self._p_idle.popleft())
        else:
            while self._c_idle and self._pq:
                w = self._c_idle.popleft()
                w.busy = True
                self._colocated_iteration(w)

    def _emit(self, items: list[tuple[SimRequest, int]], t_s: float) -> None:
        emit_tokens(items, t_s, self._on_tokens, self._on_done)

    def _prefix_lookup(self, req: SimRequest, stats: PoolStats) -> None:
        req.cached_tokens = self.prefix.hit_tokens(req)
        stats.prefix_queries_tokens_total += req.input_tokens
        stats.prefix_hits_tokens_total += req.cached_tokens
        stats.prompt_tokens_total += req.input_tokens

    # -- PD -------------------------------------------------------------------------------------
    def _start_prefill(self, w: _Worker) -> None:
        while self._pq:
            req = self._pq.popleft()
            self.prefill_stats.waiting -= 1
            if req.cancelled:
                continue
            self._prefix_lookup(req, self.prefill_stats)
            req.stage = "prefill"
            self.prefill_stats.running += 1
            w.busy = True
            t_end = self.tl.now_s + w.svc.prefill_s(req.input_tokens - req.cached_tokens, req.cached_tokens)
            self.tl.at(t_end, self._prefill_done, w, req)
            return
        w.busy = False
        self._p_idle.append(w)

    def _prefill_done(self, w: _Worker, req: SimRequest) -> None:
        t = self.tl.now_s
        self.prefill_stats.running -= 1
        self.prefix.insert(req)
        req.stage = "transfer"
        if self.link is not None:
            self.link.transfer(w.svc.kv_bytes(req.input_tokens), t, lambda t_done, r=req: self._arrived(r, t_done))
        else:
            self._arrived(req, t)
        self._start_prefill(w)

    def _arrived(self, req: SimRequest, t_s: float) -> None:
        # the first token comes from the prefill and reaches the client once D holds the state
        self._emit([(req, 1)], t_s)
        if req.cancelled or req.emitted >= req.output_tokens:
            self.decode_stats.requests_finished_total += not req.cancelled
            return
        req.stage = "decode_queue"
        req.decode_ready_s = t_s  # admission to D happens at a step boundary after this
        self.decode_stats.waiting += 1
        self._dq.append(req)
        for w in self._d:
            if not w.busy and self._dq:
                self._decode_iteration(w)

    def _admit(self, running: list[SimRequest], now_s: float) -> None:
        while self._dq and len(running) < self.dep.decode_batch and self._dq[0].decode_ready_s <= now_s:
            req = self._dq.popleft()
            self.decode_stats.waiting -= 1
            if req.cancelled:
                continue
            req.stage = "decode"
            running.append(req)
            self.decode_stats.running += 1
            self.decode_stats.kv_tokens += req.context_tokens

    def _decode_iteration(self, w: _Worker) -> None:
        self._admit(w.running, self.tl.now_s)
        if not w.running:
            w.busy = False
            return
        w.busy = True
        mean_ctx = sum(r.context_tokens for r in w.running) / len(w.running)
        self.tl.at(self.tl.now_s + w.svc.decode_step_s(len(w.running), mean_ctx), self._decode_done, w)

    def _decode_done(self, w: _Worker) -> None:
        st = self.decode_stats
        self._emit([(r, 1) for r in w.running], self.tl.now_s)
        st.generation_tokens_total += len(w.running)
        st.kv_tokens += len(w.running)
        self._retire(w, st)
        self._decode_iteration(w)

    @staticmethod
    def _retire(w: _Worker, st: PoolStats) -> None:
        keep = []
        for r in w.running:
            if r.cancelled or r.emitted >= r.output_tokens:
                st.running -= 1
                st.kv_tokens -= r.context_tokens
                st.requests_finished_total += not r.cancelled
            else:
                keep.append(r)
        w.running = keep

    # -- colocated ----------------------------------------------------------------------------
    def _colocated_iteration(self, w: _Worker) -> None:
        st = self.prefill_stats  # colocated: one pool; its numbers are reported under both names
        new: list[SimRequest] = []
        while len(w.running) + len(new) < self.dep.decode_batch and self._pq:
            new.append(self._pq.popleft())
            st.waiting -= 1
        new = [r for r in new if not r.cancelled]
        now = self.tl.now_s
        if new:
            for r in new:
                self._prefix_lookup(r, st)
                r.stage = "prefill"
            st.running += len(new)
            t_end = now + sum(w.svc.prefill_s(r.input_tokens - r.cached_tokens, r.cached_tokens) for r in new)
            self.tl.at(t_end, self._colocated_prefilled, w, new)
        elif w.running:
            mean_ctx = sum(r.context_tokens for r in w.running) / len(w.running)
            self.tl.at(now + w.svc.decode_step_s(len(w.running), mean_ctx), self._colocated_stepped, w)
        else:
            w.busy = False
            self._c_idle.append(w)

    def _colocated_prefilled(self, w: _Worker, new: list[SimRequest]) -> None:
        st = self.prefill_stats
        for r in new:
            self.prefix.insert(r)
            r.stage = "decode"
            st.kv_tokens += r.input_tokens
        self._emit([(r, 1) for r in new], self.tl.now_s)
        w.running += new
        self._retire(w, st)
        self._colocated_iteration(w)

    def _colocated_stepped(self, w: _Worker) -> None:
        st = self.prefill_stats
        self._emit([(r, 1) for r in w.running], self.tl.now_s)
        st.generation_tokens_total += len(w.running)
        st.kv_tokens += len(w.running)
        self._retire(w, st)
        self._colocated_iteration(w)
