"""Engine twins of a whole deployment: replicas behind a router, or disaggregated prefill and decode instances.

`Replicas`: aggregated serving — each request goes to the instance with the fewest requests in it (a
load-balancing router; with random prompts a KV-aware router has nothing else to go on).

`Disaggregated` (Chapter 9, §9.2, with the engines' own schedulers): prefill instances run only prompts — the
engine's scheduler with its token budget, at most `max_num_seqs` prompts per batch — and hand each finished
prompt's KV to a decode instance over the prefill instance's link (§9.2.2: T = α + V/B, the link shared by the
transfers in flight, harness.target.chapter.SharedLink); the first token reaches the client when the state has
arrived (it was sampled by the prefill, its stream comes from the decode side); decode instances admit arrived
requests at their next step boundary, up to their batch and KV room, and never prefill. Decode instance: the
least loaded; prefill instance: the one with the fewest prompts queued.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from harness.target.chapter import SharedLink
from harness.target.timeline import DoneFn, PoolStats, SimRequest, Timeline, TokensFn, emit_tokens


class _PrefillRole:
    """Mixin for a ChunkedPrefillScheduler (or TrtllmScheduler): a finished prompt leaves instead of decoding."""

    on_prefilled: Callable[[SimRequest, float], None]

    def _post(self, decode: list, chunks: list) -> None:  # type: ignore[override]
        for q, k in chunks:
            q.done_prompt += k
            if q.done_prompt >= q.prompt_target:
                self._prefilling.remove(q)
                self.prefill_stats.running -= 1
                self._release(q)
                q.r.stage = "transfer"
                self.on_prefilled(q.r, self.tl.now_s)
        self._step()


class _DecodeRole:
    """Mixin: requests arrive with their KV; admission moves them straight to the running batch (no prefill)."""

    def submit(self, req: SimRequest, now_s: float) -> None:  # type: ignore[override]
        sent = req.arrival_s
        super().submit(req, now_s)  # type: ignore[misc]
        req.arrival_s = sent  # the client's send instant, not the hand-off's

    def _step(self) -> None:  # type: ignore[override]
        super()._step()  # type: ignore[misc]
        if not self._busy and self._running:  # admitted in this call, after the batch was formed: decode them now
            super()._step()  # type: ignore[misc]

    def _admit(self, budget: int, chunks: list) -> int:  # type: ignore[override]
        s = self.settings
        while self._waiting and len(self._running) < s.max_num_seqs:
            q = self._waiting[0]
            r = q.r
            need = r.input_tokens + r.output_tokens if s.kv_policy == "reserve" else float(r.context_tokens)
            if not self._kv_fits(need):
                self.kv_limited_steps += 1
                break
            self._waiting.popleft()
            self.prefill_stats.waiting -= 1
            self.prefill_stats.running += 1
            self._hold(q, need)
            q.done_prompt = q.prompt_target
            r.stage = "decode"
            self._running.append(q)
        return budget


def role_scheduler(base: type, role: str) -> type:
    """`base` (a scheduler class of harness.target) as a prefill-only or decode-only instance."""
    mixin = {"prefill": _PrefillRole, "decode": _DecodeRole}[role]
    return type(f"{role.capitalize()}{base.__name__}", (mixin, base), {})


class Replicas:
    """Aggregated instances behind a least-loaded router, presented as one scheduler."""

    mode = "colocated"

    def __init__(self, instances: Sequence[Any]):
        self.instances = list(instances)
        self.prefill_stats = PoolStats()
        self.decode_stats = self.prefill_stats
        self.link = None
        self.kv_capacity_tokens = sum(getattr(i, "kv_capacity_tokens", 0.0) for i in self.instances)
        self._load = [0] * len(self.instances)
        self._where: dict[int, int] = {}

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None:
        self.tl = timeline

        def done(r: SimRequest, t: float) -> None:
            i = self._where.pop(id(r), None)
            if i is not None:
                self._load[i] -= 1
            on_done(r, t)

        for inst in self.instances:
            inst.bind(timeline, on_tokens, done)

    def submit(self, req: SimRequest, now_s: float) -> None:
        i = min(range(len(self.instances)), key=self._load.__getitem__)
        self._load[i] += 1
        self._where[id(req)] = i
        self.instances[i].submit(req, now_s)

    def info(self) -> dict[str, Any]:
        return {"simulated": True, "mode": "replicas", "instances": [i.info() for i in self.instances]}


class Disaggregated:
    """Prefill instances → KV link → decode instances, presented as one scheduler."""

    mode = "pd"

    def __init__(self, prefill: Sequence[Any], decode: Sequence[Any], kv_bytes: Callable[[SimRequest], float],
                 link_bandwidth_bytes_per_s: float | None, link_startup_latency_s: float):
        self.prefill, self.decode = list(prefill), list(decode)
        self.prefill_stats = PoolStats()
        self.decode_stats = PoolStats()
        self.kv_capacity_tokens = sum(getattr(i, "kv_capacity_tokens", 0.0) for i in self.decode)
        self._kv_bytes = kv_bytes
        self._bw, self._alpha = link_bandwidth_bytes_per_s, link_startup_latency_s
        self._p_load = [0] * len(self.prefill)
        self._d_load = [0] * len(self.decode)
        self._d_of: dict[int, int] = {}
        self.links: list[SharedLink] = []
        self.link = None

    def bind(self, timeline: Timeline, on_tokens: TokensFn, on_done: DoneFn) -> None:
        self.tl, self._on_tokens, self._on_done = timeline, on_tokens, on_done
        self.links = [SharedLink(timeline, self._bw, self._alpha) for _ in self.prefill] if self._bw else []
        self.link = self.links[0] if self.links else None

        def p_done(r: SimRequest, t: float) -> None:  # a prefill instance refused the request
            on_done(r, t)

        def d_done(r: SimRequest, t: float) -> None:
            i = self._d_of.pop(id(r), None)
            if i is not None:
                self._d_load[i] -= 1
            on_done(r, t)

        for i, inst in enumerate(self.prefill):
            inst.bind(timeline, on_tokens, p_done)
            inst.on_prefilled = (lambda r, t, i=i: self._prefilled(i, r, t))
        for inst in self.decode:
            inst.bind(timeline, on_tokens, d_done)

    def submit(self, req: SimRequest, now_s: float) -> None:
        req.arrival_s = now_s
        i = min(range(len(self.prefill)), key=self._p_load.__getitem__)
        self._p_load[i] += 1
        self.prefill[i].submit(req, now_s)

    def _prefilled(self, i: int, req: SimRequest, t_s: float) -> None:
        self._p_load[i] -= 1
        if self.links:
            self.links[i].transfer(self._kv_bytes(req), t_s, lambda t_done, r=req: self._arrived(r, t_done))
        else:
            self._arrived(req, t_s)

    def _arrived(self, req: SimRequest, t_s: float) -> None:
        emit_tokens([(req, 1)], t_s, self._on_tokens, self._on_done)  # the prefill's token, streamed once D holds the state
        if req.cancelled or req.emitted >= req.output_tokens:
            return
        j = min(range(len(self.decode)), key=self._d_load.__getitem__)
        self._d_load[j] += 1
        self._d_of[id(req)] = j
        self.decode[j].submit(req, t_s)

    def info(self) -> dict[str, Any]:
        return {"simulated": True, "mode": "disaggregated", "prefill": [i.info() for i in self.prefill],
                "decode": [i.info() for i in self.decode]}
