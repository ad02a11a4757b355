"""Which slot the twin of llama-server gives each request, on exact simulated instants: shared by the settle test
(tests/loop/test_measure.py) and the LRU tie test (tests/target/test_llama_server.py)."""

from __future__ import annotations

from harness.target.llama_server import LlamaServerScheduler, LlamaServerSettings
from harness.target.timeline import SimRequest, Timeline


class Steps:
    """Known step times: prefill 1 ms a token, decode 10 ms a step."""

    def prefill_time_s(self, prompt_tokens, cached_tokens=0):
        return 1e-3 * prompt_tokens

    def decode_step_time_s(self, batch, context_tokens):
        return 0.010


class SlotPicks:
    """One scheduler with `slots` slots and its timeline; `self.t` is the next instant to send at."""

    def __init__(self, slots: int = 4):
        self.sched = LlamaServerScheduler(LlamaServerSettings(slots=slots, ctx_size=4096), Steps())
        self.tl = Timeline()
        self.sched.bind(self.tl, lambda items, t: None, lambda r, t: None)
        self.t = 0.0
        self._n = 0

    def send(self, req: SimRequest, at_s: float) -> None:
        self.tl.at(at_s, self.sched.submit, req, at_s)

    def pinned(self, order: list[int]) -> None:
        """Small requests pinned to `order`'s slots, one after another (each done long before the next)."""
        for slot in order:
            self._n += 1
            self.send(SimRequest(f"small{self._n}", 16, 1, slot=slot), self.t)
            self.t += 1.0

    def take(self, n: int) -> list[int]:
        """`n` unpinned long requests one after another, each still generating when the next arrives: the slot each took."""
        out = []
        for i in range(n):
            rid = f"long{self._n}-{i}"
            self.send(SimRequest(rid, 16, 10_000), self.t)
            self.tl.run_due(self.t + 0.5)
            out.append(next(x.id for x in self.sched.slots if x.req is not None and x.req.request_id == rid))
            self.t += 0.5
        return out
