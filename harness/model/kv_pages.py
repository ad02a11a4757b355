"""Persisted KV pages: page and segment sizes, the reusable contiguous prefix after a restart, and
the wait-or-recompute decision for a missing page (Chapter 9, §9.5.3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from harness.errors import HarnessError
from harness.model.kv import kv_bytes_per_token
from harness.specs._validate import non_negative, non_negative_int, positive, positive_int
from harness.specs.models import ModelSpec

_OWNER = "KV pages"


def _dict(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


@dataclass(frozen=True, slots=True)
class PageLayout:
    tokens_per_page: int
    page_bytes: float  # one logical page, all layers
    segments_per_page: int  # contiguous pieces when K and V of each layer move separately
    segment_bytes: float

    def to_dict(self) -> dict:
        return _dict(self)


def page_layout(model: ModelSpec, tokens_per_page: int, kv_bytes_per_elem: float) -> PageLayout:
    """Page = tokens·(KV bytes per token); split per layer and per K/V it is 2·n_layers segments for GQA,
    n_layers for MLA (one latent) (§9.5.3: Qwen3-8B, 16 tokens: 2.25 MiB = 72 × 32 KiB)."""
    positive_int(_OWNER, "tokens_per_page", tokens_per_page)
    page = tokens_per_page * kv_bytes_per_token(model, kv_bytes_per_elem)
    segments = model.n_layers * (1 if model.attention == "mla" else 2)
    return PageLayout(tokens_per_page, page, segments, page / segments)


@dataclass(frozen=True, slots=True)
class PageReuse:
    prompt_tokens: int
    pages_read: int
    pages_used: int  # leading contiguous matched pages that also end before the last prompt token
    tokens_reused: int
    tokens_to_compute: int
    bytes_read: float
    bytes_used: float
    bytes_wasted: float

    def to_dict(self) -> dict:
        return _dict(self)


def reusable_prefix(prompt_tokens: int, tokens_per_page: int, page_bytes: float, pages_matched: Sequence[bool]) -> PageReuse:
    """Only a contiguous run of matched pages from the start replaces compute, and it must stop before
    the last prompt token, which is always computed: used = min(leading run, ⌊(L−1)/page⌋)
    (§9.5.3, Fig. 9-36, footnote 23: 64 pages read for 1024 tokens, 63 used = 1008 tokens;
    144 MiB read, 141.75 MiB used)."""
    positive_int(_OWNER, "prompt_tokens", prompt_tokens)
    positive_int(_OWNER, "tokens_per_page", tokens_per_page)
    positive(_OWNER, "page_bytes", page_bytes)
    if any(not isinstance(m, bool) for m in pages_matched):
        raise HarnessError(f"{_OWNER}: pages_matched must be a list of true/false per page read, got {list(pages_matched)!r}.")
    read = len(pages_matched)
    if read * tokens_per_page > prompt_tokens + tokens_per_page - 1:
        raise HarnessError(
            f"{_OWNER}: {read} pages of {tokens_per_page} tokens cover more than the {prompt_tokens}-token prompt; "
            "read at most ⌈prompt_tokens / tokens_per_page⌉ pages."
        )
    run = 0
    for m in pages_matched:
        if not m:
            break
        run += 1
    used = min(run, (prompt_tokens - 1) // tokens_per_page)
    reused = used * tokens_per_page
    return PageReuse(prompt_tokens, read, used, reused, prompt_tokens - reused, read * page_bytes, used * page_bytes,
                     (read - used) * page_bytes)


@dataclass(frozen=True, slots=True)
class MissingPageDecision:
    waited_s: float
    expected_remaining_wait_s: float | None
    recompute_s: float
    action: Literal["wait", "recompute"]
    rule: str

    def to_dict(self) -> dict:
        return _dict(self)


def missing_page_decision(waited_s: float, recompute_s: float, expected_remaining_wait_s: float | None = None) -> MissingPageDecision:
    """Wait for a missing page or recompute what it covers (§9.5.3).

    With an expected remaining wait W: wait iff W < T_recompute. Without one (the object may never
    come), wait at most T_recompute in total, then recompute: the loss is then at most 2× the better
    choice (the rent-or-buy bound). The chapter's case: 1 s waited > 0.856 s to recompute 8192 tokens.
    """
    non_negative(_OWNER, "waited_s", waited_s)
    positive(_OWNER, "recompute_s", recompute_s)
    if expected_remaining_wait_s is not None:
        non_negative(_OWNER, "expected_remaining_wait_s", expected_remaining_wait_s)
        act = "wait" if expected_remaining_wait_s < recompute_s else "recompute"
        return MissingPageDecision(waited_s, expected_remaining_wait_s, recompute_s, act, "expected remaining wait < recompute")
    act = "wait" if waited_s < recompute_s else "recompute"
    return MissingPageDecision(waited_s, None, recompute_s, act, "wait at most the recompute time, then recompute")


def contiguous_pages(count: int, missing_at: int | None = None) -> list[bool]:
    """A page-match list of `count` pages, all matched except `missing_at` (for scenarios and tests)."""
    non_negative_int(_OWNER, "pages_read", count)
    if missing_at is not None and not (0 <= missing_at < count):
        raise HarnessError(f"{_OWNER}: missing_page_index must be in [0, {count}), got {missing_at!r}.")
    return [i != missing_at for i in range(count)]
