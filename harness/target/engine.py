"""The embedded target's real-time driver: runs a clock-agnostic scheduler's events on the asyncio loop.

The scheduling itself lives in harness.target.chapter (the chapter's PD / colocated deployment,
Chapter 9 §9.2) and harness.target.llama_server (llama.cpp's slot scheduler); both only schedule
callbacks on a harness.target.timeline.Timeline. `Engine` fires those events when the SimClock
reaches them, writes the tokens to the HTTP side (`emit`) and resolves each request's future;
harness.target.des drives the very same scheduler in simulated time, without sleeping.
`FixedTimingEngine` is the queue-free profile for client benchmarks.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from harness.target.chapter import ChapterScheduler, PrefixCache, SharedLink  # noqa: F401 - re-exported
from harness.target.clock import SimClock
from harness.target.deployment import EmulatedDeployment
from harness.target.timeline import PREFIX_BLOCK_TOKENS, PREFIX_CACHE_BLOCKS, PoolStats, Scheduler, SimRequest, Timeline  # noqa: F401

# emit(list of (request, tokens to emit now), scheduled perf_counter_ns) -> awaitable
Emitter = Callable[[list[tuple[SimRequest, int]], int], Awaitable[None]]


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


class Engine:
    """Runs a scheduler (a scenario's deployment, or any Scheduler) in real time; `submit` and await `request.done`."""

    def __init__(self, dep: EmulatedDeployment | Scheduler, clock: SimClock, emit: Emitter):
        if isinstance(dep, EmulatedDeployment):
            self.dep: EmulatedDeployment | None = dep
            self.scheduler: Any = ChapterScheduler(dep)
        else:
            self.dep = getattr(dep, "dep", None)
            self.scheduler = dep
        self.clock = clock
        self.emit = emit
        self.lag = LagStats()
        self.timeline = Timeline()
        self._out: list[tuple[str, Any, float]] = []  # ("tokens", items, at_s) | ("done", request, at_s), in event order
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.scheduler.bind(self.timeline, self._on_tokens, self._on_done)

    # the pools the metrics page reports
    @property
    def mode(self) -> str:
        return self.scheduler.mode

    @property
    def prefill_stats(self) -> PoolStats:
        return self.scheduler.prefill_stats

    @property
    def decode_stats(self) -> PoolStats:
        return self.scheduler.decode_stats

    @property
    def link(self) -> Any:
        return self.scheduler.link

    @property
    def kv_capacity_tokens(self) -> float:
        return self.scheduler.kv_capacity_tokens

    @property
    def ready_at_s(self) -> float | None:
        return getattr(self.scheduler, "ready_at_s", None)

    def _on_tokens(self, items: list[tuple[SimRequest, int]], at_s: float) -> None:
        self._out.append(("tokens", items, at_s))

    def _on_done(self, req: SimRequest, at_s: float) -> None:
        self._out.append(("done", req, at_s))

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, req: SimRequest) -> None:
        now = self.clock.now_s()
        self.timeline.run_due(now)  # events already due happen before this arrival
        self.timeline.advance_to(now)
        req.done = asyncio.get_running_loop().create_future()
        self.scheduler.submit(req, now)
        if self._wake is not None:
            self._wake.set()

    async def _flush(self) -> None:
        while self._out:
            out, self._out = self._out, []
            for kind, obj, at_s in out:
                if kind == "tokens":
                    self.lag.add(max(0.0, self.clock.now_s() - at_s) * self.clock.time_scale)
                    await self.emit(obj, self.clock.wall_ns(at_s))
                elif obj.done is not None and not obj.done.done():
                    obj.done.set_result(None)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._flush()
            t_next = self.timeline.next_s()
            self._wake.clear()
            if t_next is None:
                await self._wake.wait()
                continue
            delay_s = (self.clock.wall_ns(t_next) - time.perf_counter_ns()) / 1e9
            if delay_s > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay_s)
                    continue  # a request arrived: it may have scheduled an earlier event
                except asyncio.TimeoutError:
                    pass
            self.timeline.run_due(max(t_next, self.clock.now_s()))


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
