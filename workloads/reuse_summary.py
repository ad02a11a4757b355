"""Prefix reuse of a multi-turn run: what the client resent of each session's history against what the engine says it
served from its prefix cache (Chapter 9 §9.5: KV reuse and cache-aware routing are about this workload).

Over the successful later turns (turn > 0) of the run: the tokens of prompt they carried, the reused prefix
(`reused_prefix_tokens`: the history the session sent or received before), and, where the engine reports it,
`usage.prompt_tokens_details.cached_tokens` (`cached_tokens_usage`), with their ratio: the share of the resent
history the engine did not recompute. Also per turn index. Pure: computed from the stored requests table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TurnReuse:
    turn: int
    requests: int
    prompt_tokens: int
    reused_prefix_tokens: int
    cached_tokens: int | None  # summed over the requests whose engine reported it
    cached_reported: int  # requests with a cached_tokens_usage


@dataclass(frozen=True)
class ReuseSummary:
    replies: str | None  # "live", "synthetic" (the artifact's), or None for single-turn runs
    sessions: int
    later_turns: int
    prompt_tokens: int
    reused_prefix_tokens: int
    cached_tokens: int | None
    cached_reported: int
    cached_of_reused: float | None  # cached ÷ reused, over the requests that report cached tokens
    by_turn: list[TurnReuse] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise_reuse(requests: Any, replies: str | None = None) -> ReuseSummary | None:
    """None when the run has no later turns (or its records predate the reuse columns)."""
    df = requests
    if not len(df) or "reused_prefix_tokens" not in df.columns or not (df["turn"] > 0).any():
        return None
    later = df[(df["turn"] > 0) & (df["error_class"] == "ok")]
    has = later["cached_tokens_usage"].notna()

    def tot(col: str, rows: Any) -> int:
        return int(rows[col].fillna(0).astype("int64").sum())

    by_turn = []
    for k, g in later.groupby("turn", sort=True):
        hk = g["cached_tokens_usage"].notna()
        by_turn.append(TurnReuse(int(k), int(len(g)), tot("prompt_tokens_target", g), tot("reused_prefix_tokens", g),
                                 tot("cached_tokens_usage", g[hk]) if hk.any() else None, int(hk.sum())))
    reused_rep = tot("reused_prefix_tokens", later[has])
    cached = tot("cached_tokens_usage", later[has]) if has.any() else None
    return ReuseSummary(replies, int(df["session_id"].nunique()), int(len(later)), tot("prompt_tokens_target", later),
                        tot("reused_prefix_tokens", later), cached, int(has.sum()),
                        cached / reused_rep if cached is not None and reused_rep > 0 else None, by_turn)


def reuse_lines(r: ReuseSummary) -> list[str]:
    head = (f"multi-turn ({r.replies or 'unknown'} replies): {r.later_turns} later turns of {r.sessions} sessions resent "
            f"{r.reused_prefix_tokens} tokens of history in {r.prompt_tokens} prompt tokens")
    if r.cached_tokens is None:
        return [head + "; the engine reported no cached_tokens (usage.prompt_tokens_details), so its reuse is not measured"]
    share = "n/a" if r.cached_of_reused is None else f"{r.cached_of_reused:.0%}"
    return [head + f"; the engine served {r.cached_tokens} from its prefix cache ({share} of the history resent, over the "
            f"{r.cached_reported} requests that report it)"]
