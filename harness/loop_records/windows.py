"""Stage windows: each measurement of the isolated stages over a loop — when it ran, after which served point, and what
it measured (the spread table of the report reads these)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

from harness.served import record_from_dict
from harness.target.stage_requests import RequestCheck, mixed_alone_prompt_s, parse_mixed_phase


@dataclass(frozen=True)
class StageWindow:
    """One measurement of the isolated stages: when it began (seconds since the loop started), after which served point
    (None: before them all), how many requests it sent, how long it took and how long each part took; and what it
    measured: the engine's median prompt time of the isolated prefills, the client's median decode step at each batch,
    the engine's median prompt time of the prompts sent while other slots decoded per (decode batch, prompt length),
    and that over the same-length prompt alone just before."""

    index: int
    started_s: float
    after_point: int | None
    requests: int
    duration_s: float
    phases_s: dict[str, float] = field(default_factory=dict)  # seconds of each part (harness.loop.stages)
    prefill_prompt_s: float | None = None
    decode_step_s_by_batch: tuple[tuple[int, float], ...] = ()
    mixed_prompt_s: tuple[tuple[int, int, float], ...] = ()  # (decode batch, prompt tokens, seconds)
    mixed_extra_s: tuple[tuple[int, int, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "stage window") -> "StageWindow":
        tup = (lambda rows: tuple(tuple(r) for r in rows or ()))
        return record_from_dict(cls, d, source, decode_step_s_by_batch=tup, mixed_prompt_s=tup, mixed_extra_s=tup,
                     phases_s=lambda x: dict(x or {}))

    def summarised(self, checks: Sequence[RequestCheck]) -> "StageWindow":
        """This window with what its own requests among `checks` measured."""
        mine = [c for c in checks if c.window == self.index and not c.error]
        pre = [c.engine_prompt_s for c in mine if c.phase == "prefill" and c.engine_prompt_s is not None]
        by_b: dict[int, list[float]] = {}
        mixed: dict[tuple[int, int], list[float]] = {}
        alone = mixed_alone_prompt_s(mine)
        extra: dict[tuple[int, int], list[float]] = {}
        for c in mine:
            if c.phase.startswith("decode@") and (st := c.client_step_s) is not None:
                by_b.setdefault(int(c.phase.split("@", 1)[1]), []).append(st)
            elif (ph := parse_mixed_phase(c.phase)) and ph[0] == "mixed" and c.engine_prompt_s is not None:
                mixed.setdefault((ph[2], ph[1]), []).append(c.engine_prompt_s)
                if (a := alone.get((c.window, c.rep, ph[1], ph[2]))) is not None:
                    extra.setdefault((ph[2], ph[1]), []).append(c.engine_prompt_s - a)
        return replace(self, prefill_prompt_s=statistics.median(pre) if pre else None,
                       decode_step_s_by_batch=tuple((b, statistics.median(v)) for b, v in sorted(by_b.items())),
                       mixed_prompt_s=tuple((b, p, statistics.median(v)) for (b, p), v in sorted(mixed.items())),
                       mixed_extra_s=tuple((b, p, statistics.median(v)) for (b, p), v in sorted(extra.items())))


__all__ = ["StageWindow"]
