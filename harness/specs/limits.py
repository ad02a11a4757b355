"""Physical bounds on the counts a user gives (tokens, batch, grid sizes): a value beyond them is refused, naming the bound.

These are outer bounds that no real deployment reaches, so a typo (2**63-1 tokens, a batch of 1e11) is an
error instead of a silent figure; the model's own checks (memory fit, SLO) apply inside them.
"""

from __future__ import annotations

# The longest context window of any published model (Llama 4 Scout: 10M tokens), rounded up to 10 Mi.
MAX_CONTEXT_TOKENS = 10 * 2**20
MAX_CONTEXT_SOURCE = "the longest context window of any published model (Llama 4 Scout, 10M tokens)"

# Arrival rates and the PD search size are bounded by the model (harness.model.plan / capacity), where they are used.


def context_problem(tokens: int, what: str) -> str | None:
    """Why `tokens` of one request's context are impossible (None when they are not)."""
    if tokens > MAX_CONTEXT_TOKENS:
        return (f"{what} = {tokens} tokens is above {MAX_CONTEXT_TOKENS} tokens, {MAX_CONTEXT_SOURCE}; "
                "give a context a model can hold")
    return None


def resident_tokens_problem(batch: int, tokens_per_request: int, memory_bytes: float, where: str) -> str | None:
    """A decode batch whose KV cannot fit in `memory_bytes` even at one byte per resident token (every resident
    token keeps at least one KV byte per layer): the bound is independent of the model and of the dtype."""
    resident = batch * tokens_per_request
    if resident > memory_bytes:
        most = max(int(memory_bytes // max(tokens_per_request, 1)), 0)
        return (f"decode_batch {batch} × {tokens_per_request} tokens = {resident:.3g} resident tokens is more than the "
                f"{memory_bytes:.3g} bytes of GPU memory of {where} (each resident token keeps at least one byte of KV "
                f"per layer); give a decode_batch of at most {most}, and see the plan's memory fit for the real limit")
    return None


# What the model enumerates or simulates in memory (arrays of this many cells, a few hundred MB at most).
MAX_GRID_CELLS = 2**22  # allocation grids: one cell per (P, D) split of the pools
MAX_SIMULATED_DRAWS = 2**27  # routing simulations: one int16 per expert choice drawn


def grid_problem(counts: list[int], what: str) -> str | None:
    cells = 1
    for c in counts:
        cells *= c + 1
    if cells > MAX_GRID_CELLS:
        return (f"{what}: the allocation grid of {' × '.join(str(c + 1) for c in counts)} = {cells} splits is above the "
                f"{MAX_GRID_CELLS} the model enumerates in memory; give smaller pools")
    return None
