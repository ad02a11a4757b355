"""The clock-agnostic core of the embedded target: requests, pool counters and a time-ordered event queue.

Schedulers (harness.target.chapter, harness.target.llama_cpp) never sleep and never read a clock:
they schedule callbacks at absolute simulated instants with `Timeline.at` and report tokens and
completions through two callbacks. A driver decides what "now" is: harness.target.engine.Engine
runs the events on the asyncio loop in real time (the HTTP twin), harness.target.des runs them as
fast as the CPU allows (the discrete-event prediction). Both run the same scheduler code.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable, Protocol

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
    done: Any = None  # the real-time driver's asyncio.Future (None in the discrete-event simulation)
    sink: object = None  # the HTTP side's writer, opaque here
    rejected: str | None = None  # why the engine refused the request (e.g. the prompt exceeds a slot's context)
    first_token_s: float | None = None
    finished_s: float | None = None
    slot: int | None = None  # the engine slot the request asks for (llama-server's `id_slot`); None: the scheduler picks
    prompt_start_s: float | None = None  # when the engine began processing its prompt (llama-server's prompt_ms start)

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.emitted


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


# on_tokens(list of (request, tokens emitted now), simulated instant); on_done(request, simulated instant)
TokensFn = Callable[[list[tuple[SimRequest, int]], float], None]
DoneFn = Callable[[SimRequest, float], None]


class Timeline:
    """Events at absolute simulated instants, run in (time, insertion) order; `now_s` is the running event's time."""

    __slots__ = ("_heap", "_seq", "now_s", "events_run")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = 0
        self.now_s = 0.0
        self.events_run = 0

    def at(self, t_s: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._heap, (t_s, self._seq, fn, args))
        self._seq += 1

    def next_s(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def advance_to(self, t_s: float) -> None:
        """Move `now_s` forward (a driver does this before submitting a request that arrives at t_s)."""
        if t_s > self.now_s:
            self.now_s = t_s

    def run_due(self, until_s: float, limit: int | None = None) -> int:
        """Run every event due at or before `until_s`, in order (at most `limit`); returns how many ran."""
        n = 0
        heap = self._heap
        while heap and heap[0][0] <= until_s and (limit is None or n < limit):
            t, _, fn, args = heapq.heappop(heap)
            if t > self.now_s:
                self.now_s = t
            fn(*args)
            n += 1
        self.events_run += n
        return n


class Scheduler(Protocol):
    """What a driver needs from a scheduling core."""

    mode: str  # "pd" or "colocated" (for the metrics page's pools)
    prefill_stats: PoolStats
    decode_stats: PoolStats
    link: Any
    kv_capacity_tokens: float

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None: ...

    def submit(self, req: SimRequest, now_s: float) -> None: ...

    def info(self) -> dict[str, Any]: ...


def emit_tokens(items: list[tuple[SimRequest, int]], t_s: float, on_tokens: TokensFn, on_done: DoneFn) -> list[SimRequest]:
    """Count the tokens of the live requests, report them, finish those that reached their output; returns the finished."""
    live = [(r, n) for r, n in items if not r.cancelled]
    for r, n in live:
        if r.emitted == 0:
            r.first_token_s = t_s
        r.emitted += n
    if live:
        on_tokens(live, t_s)
    done = []
    for r, _ in live:
        if r.emitted >= r.output_tokens:
            r.stage = "done"
            r.finished_s = t_s
            on_done(r, t_s)
            done.append(r)
    return done
