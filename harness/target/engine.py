"""The simulated serving engine behind the embedded target: FIFO pools, prefill, shared KV link, batched decode.

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

import asyncio
import collections
import heapq
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from harness.target.clock import SimClock
from harness.target.deployment import EmulatedDeployment

PREFIX_BLOCK_TOKENS = 512  # block size of the emulated prefix cache (vLLM's default is 16; 512 keeps hashing cheap)
PREFIX_CACHE_BLOCKS = 4096


@dataclass(eq=False)
class SimRequest:
    request_id: str
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()
    arrival_s: float = 0.0
    decode_ready_s: float = 0.0  # when D holds the state (PD)
    cached_tokens: int = 0
    emitted: int = 0
    cancelled: bool = False
    stage: str = "queued"  # queued | prefill | transfer | decode_queue | decode | done
    done: asyncio.Future | None = None
    sink: object = None  # the HTTP side's writer, opaque here

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.emitted


# emit(list of (request, tokens to emit now), scheduled perf_counter_ns) -> awaitable
Emitter = Callable[[list[tuple[SimRequest, int]], int], Awaitable[None]]


@dataclass
class PoolStats:
    waiting: int = 0
    running: int = 0
    kv_tokens: float = 0.0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prefix_queries_tokens_total: int = 0
    prefix_hits_tokens_total: int = 0
    requests_finished_total: int = 0


@dataclass
class LagStats:
    """How late the emulator ran behind its own schedule (a loaded CPU shows up here, not silently)."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def add(self, lag_s: float) -> None:
        self.count += 1
        self.total_s += lag_s
        self.max_s = max(self.max_s, lag_s)


class SharedLink:
    """Fluid link: n transfers in flight each progress at B/n (processor sharing), plus α per transfer."""

    def __init__(self, clock: SimClock, bandwidth_bytes_per_s: float, startup_latency_s: float):
        self.clock = clock
        self.bandwidth = bandwidth_bytes_per_s
        self.alpha = startup_latency_s
        self._active: dict[asyncio.Future, float] = {}
        self._last_s = 0.0
        self._changed = asyncio.Event()
        self.bytes_total = 0.0
        self.transfers_total = 0

    @property
    def in_flight(self) -> int:
        return len(self._active)

    def _advance(self, now_s: float) -> None:
        if self._active:
            done_bytes = (now_s - self._last_s) * self.bandwidth / len(self._active)
            for fut in self._active:
                self._active[fut] -= done_bytes
        self._last_s = now_s

    async def transfer(self, nbytes: float, start_s: float) -> float:
        """Carry `nbytes` starting at simulated `start_s`; returns the simulated completion time."""
        await self.clock.sleep_until(start_s + self.alpha)
        fut = asyncio.get_running_loop().create_future()
        self._advance(max(self._last_s, start_s + self.alpha))
        self._active[fut] = float(nbytes)
        self.bytes_total += nbytes
        self.transfers_total += 1
        self._changed.set()
        return await fut

    async def run(self) -> None:
        while True:
            if not self._active:
                self._changed.clear()
                await self._changed.wait()
                continue
            n = len(self._active)
            t_next = self._last_s + min(self._active.values()) * n / self.bandwidth
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=max(0.0, (self.clock.wall_ns(t_next) - time.perf_counter_ns()) / 1e9))
                continue  # a new transfer joined: recompute shares from now
            except asyncio.TimeoutError:
                pass
            self._advance(t_next)
            for fut, rem in list(self._active.items()):
                if rem <= 1.0:  # bytes; float residue of the fluid model
                    del self._active[fut]
                    fut.set_result(t_next)


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


class Engine:
    """Runs the emulated deployment on the asyncio loop; `submit` a request and await `request.done`."""

    def __init__(self, dep: EmulatedDeployment, clock: SimClock, emit: Emitter):
        self.dep = dep
        self.clock = clock
        self.emit = emit
        self.prefill_stats = PoolStats()
        self.decode_stats = PoolStats()
        self.lag = LagStats()
        self.prefix = PrefixCache()
        self._prefill_q: asyncio.Queue[SimRequest] = asyncio.Queue()
        self._decode_q: collections.deque[SimRequest] = collections.deque()
        self._decode_ready = asyncio.Event()
        self._first_arrival = asyncio.Event()
        self.ready_at_s: float | None = None  # set by the first request: startup_s counts from it
        self._tasks: list[asyncio.Task] = []
        self.link = (
            SharedLink(clock, dep.link_bandwidth_bytes_per_s, dep.link_startup_latency_s)
            if dep.mode == "pd" and dep.link_bandwidth_bytes_per_s else None
        )
        self.kv_capacity_tokens = self._kv_capacity_tokens()

    def _kv_capacity_tokens(self) -> float:
        from harness.model.forward import param_counts

        gpus = self.dep.decode_gpus if self.dep.mode == "pd" else self.dep.colocated_gpus
        total = 0.0
        for g in gpus:
            svc = self.dep.services[g]
            weights = param_counts(svc.model).total * svc.weight_bytes_per_param
            total += max(0.0, svc.gpu.hbm_capacity_bytes - weights) / svc.kv_bytes(1)
        return total

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.dep.mode == "pd":
            self._tasks += [loop.create_task(self._prefill_worker(g)) for g in self.dep.prefill_gpus]
            self._tasks += [loop.create_task(self._decode_worker(g)) for g in self.dep.decode_gpus]
            if self.link is not None:
                self._tasks.append(loop.create_task(self.link.run()))
        else:
            self._tasks += [loop.create_task(self._colocated_worker(g)) for g in self.dep.colocated_gpus]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- intake -------------------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        req.arrival_s = self.clock.now_s()
        req.done = asyncio.get_running_loop().create_future()
        if self.ready_at_s is None:
            self.ready_at_s = req.arrival_s + self.dep.startup_s
            self._first_arrival.set()
        self.prefill_stats.waiting += 1
        self._prefill_q.put_nowait(req)

    @property
    def ready(self) -> bool:
        return self.ready_at_s is not None and self.clock.now_s() >= self.ready_at_s

    async def _wait_ready(self) -> float:
        """The service becomes ready startup_s after the first request arrives, so the backlog at
        readiness is λ·T_s as in §9.6.1 however long the client took to start."""
        await self._first_arrival.wait()
        assert self.ready_at_s is not None
        await self.clock.sleep_until(self.ready_at_s)
        return self.ready_at_s

    def _note_lag(self, scheduled_s: float) -> None:
        self.lag.add(max(0.0, self.clock.now_s() - scheduled_s) * self.clock.time_scale)

    async def _emit(self, items: list[tuple[SimRequest, int]], at_s: float) -> None:
        self._note_lag(at_s)
        live = [(r, n) for r, n in items if not r.cancelled]
        for r, n in live:
            r.emitted += n
        await self.emit(live, self.clock.wall_ns(at_s))
        for r, _ in live:
            if r.emitted >= r.output_tokens:
                self._finish(r)

    def _finish(self, req: SimRequest) -> None:
        req.stage = "done"
        if req.done is not None and not req.done.done():
            req.done.set_result(None)

    def _prefix_lookup(self, req: SimRequest, stats: PoolStats) -> None:
        req.cached_tokens = self.prefix.hit_tokens(req)
        stats.prefix_queries_tokens_total += req.input_tokens
        stats.prefix_hits_tokens_total += req.cached_tokens
        stats.prompt_tokens_total += req.input_tokens

    # -- PD -------------------------------------------------------------------------------------
    async def _prefill_worker(self, gpu: str) -> None:
        svc = self.dep.services[gpu]
        t = await self._wait_ready()
        while True:
            req = await self._prefill_q.get()
            self.prefill_stats.waiting -= 1
            if req.cancelled:
                continue
            t = max(t, req.arrival_s)  # FIFO: start when this GPU is free and the request is here
            self._prefix_lookup(req, self.prefill_stats)
            req.stage = "prefill"
            self.prefill_stats.running += 1
            t_end = t + svc.prefill_s(req.input_tokens - req.cached_tokens, req.cached_tokens)
            await self.clock.sleep_until(t_end)
            self._note_lag(t_end)
            self.prefill_stats.running -= 1
            self.prefix.insert(req)
            asyncio.get_running_loop().create_task(self._handoff(req, t_end, svc))
            t = t_end

    async def _handoff(self, req: SimRequest, t_s: float, svc) -> None:
        req.stage = "transfer"
        if self.link is not None:
            t_s = await self.link.transfer(svc.kv_bytes(req.input_tokens), t_s)
        # the first token comes from the prefill and reaches the client once D holds the state
        await self._emit([(req, 1)], t_s)
        if req.cancelled or req.emitted >= req.output_tokens:
            self.decode_stats.requests_finished_total += not req.cancelled
            return
        req.stage = "decode_queue"
        req.decode_ready_s = t_s  # admission to D happens at a step boundary after this
        self.decode_stats.waiting += 1
        self._decode_q.append(req)
        self._decode_ready.set()

    def _admit(self, running: list[SimRequest], now_s: float) -> None:
        while self._decode_q and len(running) < self.dep.decode_batch and self._decode_q[0].decode_ready_s <= now_s:
            req = self._decode_q.popleft()
            self.decode_stats.waiting -= 1
            if req.cancelled:
                continue
            req.stage = "decode"
            running.append(req)
            self.decode_stats.running += 1
            self.decode_stats.kv_tokens += req.context_tokens

    async def _decode_worker(self, gpu: str) -> None:
        svc = self.dep.services[gpu]
        running: list[SimRequest] = []
        t = await self._wait_ready()
        while True:
            self._admit(running, t)
            if not running:
                self._decode_ready.clear()
                if not self._decode_q:
                    await self._decode_ready.wait()
                # idle: the next step starts when the head request is ready (simulated time, not the wall clock)
                t = max(t, self._decode_q[0].decode_ready_s if self._decode_q else t)
                await self.clock.sleep_until(t)
                continue
            mean_ctx = sum(r.context_tokens for r in running) / len(running)
            t_end = t + svc.decode_step_s(len(running), mean_ctx)
            await self.clock.sleep_until(t_end)
            await self._emit([(r, 1) for r in running], t_end)
            self.decode_stats.generation_tokens_total += len(running)
            self.decode_stats.kv_tokens += len(running)
            keep = []
            for r in running:
                if r.cancelled or r.emitted >= r.output_tokens:
                    self.decode_stats.running -= 1
                    self.decode_stats.kv_tokens -= r.context_tokens
                    self.decode_stats.requests_finished_total += not r.cancelled
                else:
                    keep.append(r)
            running = keep
            t = t_end

    # -- colocated ----------------------------------------------------------------------------
    async def _colocated_worker(self, gpu: str) -> None:
        svc = self.dep.services[gpu]
        st = self.prefill_stats  # colocated: one pool; its numbers are reported under both names
        running: list[SimRequest] = []
        t = await self._wait_ready()
        while True:
            new: list[SimRequest] = []
            t_end = t
            if not running:
                req = await self._prefill_q.get()
                st.waiting -= 1
                new.append(req)
                t = max(t, req.arrival_s)
            while len(running) + len(new) < self.dep.decode_batch and not self._prefill_q.empty():
                new.append(self._prefill_q.get_nowait())
                st.waiting -= 1
            new = [r for r in new if not r.cancelled]
            if new:
                for r in new:
                    self._prefix_lookup(r, st)
                    r.stage = "prefill"
                t_end = t + sum(svc.prefill_s(r.input_tokens - r.cached_tokens, r.cached_tokens) for r in new)
                st.running += len(new)
                await self.clock.sleep_until(t_end)
                for r in new:
                    self.prefix.insert(r)
                    r.stage = "decode"
                    st.kv_tokens += r.input_tokens
                await self._emit([(r, 1) for r in new], t_end)
                running += new
            elif running:
                mean_ctx = sum(r.context_tokens for r in running) / len(running)
                t_end = t + svc.decode_step_s(len(running), mean_ctx)
                await self.clock.sleep_until(t_end)
                await self._emit([(r, 1) for r in running], t_end)
                st.generation_tokens_total += len(running)
                st.kv_tokens += len(running)
            keep = []
            for r in running:
                if r.cancelled or r.emitted >= r.output_tokens:
                    st.running -= 1
                    st.kv_tokens -= r.context_tokens
                    st.requests_finished_total += not r.cancelled
                else:
                    keep.append(r)
            running = keep
            t = t_end


class FixedTimingEngine:
    """A fast, queue-free target for measuring the client: first token `ttft_s` after arrival, then one
    every `itl_s` (itl_s 0: the whole stream at once). Used by the load generator's speed benchmark."""

    def __init__(self, clock: SimClock, emit: Emitter, ttft_s: float, itl_s: float):
        self.clock = clock
        self.emit = emit
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self._heap: list[tuple[float, int, SimRequest]] = []
        self._seq = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.lag = LagStats()
        self.stats = PoolStats()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, req: SimRequest) -> None:
        req.arrival_s = self.clock.now_s()
        req.done = asyncio.get_running_loop().create_future()
        self.stats.running += 1
        self.stats.prompt_tokens_total += req.input_tokens
        heapq.heappush(self._heap, (req.arrival_s + self.ttft_s, self._seq, req))
        self._seq += 1
        self._wake.set()

    async def _run(self) -> None:
        while True:
            if not self._heap:
                self._wake.clear()
                await self._wake.wait()
                continue
            t_due = self._heap[0][0]
            self._wake.clear()
            delay = (self.clock.wall_ns(t_due) - time.perf_counter_ns()) / 1e9
            if delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                    continue  # an earlier deadline may have arrived
                except asyncio.TimeoutError:
                    pass
            groups: dict[float, list[tuple[SimRequest, int]]] = {}
            now = self.clock.now_s()
            while self._heap and self._heap[0][0] <= now:
                t, _, req = heapq.heappop(self._heap)
                n = req.output_tokens - req.emitted if self.itl_s == 0 else 1
                groups.setdefault(t, []).append((req, n))
            for t, items in groups.items():
                self.lag.add(max(0.0, now - t) * self.clock.time_scale)
                live = [(r, n) for r, n in items if not r.cancelled]
                for r, n in live:
                    r.emitted += n
                await self.emit(live, self.clock.wall_ns(t))
                self.stats.generation_tokens_total += sum(n for _, n in live)
                for r, _ in items:
                    if r.cancelled or r.emitted >= r.output_tokens:
                        self.stats.running -= 1
                        self.stats.requests_finished_total += not r.cancelled
                        if r.done is not None and not r.done.done():
                            r.done.set_result(None)
                    else:
                        heapq.heappush(self._heap, (t + self.itl_s, self._seq, r))
                        self._seq += 1
