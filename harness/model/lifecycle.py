"""Instance lifecycle: graph-capture break-even at startup, background migration that must catch a
growing state, reconfiguration time and recovery from a token log and a KV checkpoint
(Chapter 9, §9.6.1 – 9.6.3)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from harness.errors import HarnessError
from harness.specs._validate import non_negative, non_negative_int, positive, positive_int

_OWNER = "lifecycle"


def _dict(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


@dataclass(frozen=True, slots=True)
class GraphCaptureBreakEven:
    extra_startup_s: float  # T_s added by graph capture
    saving_per_step_s: float  # δ saved per batch execution
    batch: int  # requests that each emit one token per step
    break_even_steps: float  # T_s / δ
    first_net_positive_step: int  # first N with N·δ > T_s
    break_even_tokens: float  # steps × batch

    def to_dict(self) -> dict:
        return _dict(self)


def graph_capture_break_even(extra_startup_s: float, saving_per_step_s: float, batch: int = 1) -> GraphCaptureBreakEven:
    """Net gain N·δ − T_s after N batch executions; break-even at N = T_s/δ (§9.6.1: 10 s / 0.2 ms = 50 000
    steps, net positive from step 50 001; × 32 requests per step ≈ 1.6 M output tokens). The saving comes once
    per batch execution, so the count is in steps, not requests."""
    non_negative(_OWNER, "extra_startup_s", extra_startup_s)
    positive(_OWNER, "saving_per_step_s", saving_per_step_s)
    positive_int(_OWNER, "batch", batch)
    n = extra_startup_s / saving_per_step_s
    # T_s/δ is an integer up to float error in the chapter's case; snap before taking "the next step"
    n_int = round(n) if math.isclose(n, round(n), rel_tol=1e-9) else math.floor(n)
    return GraphCaptureBreakEven(extra_startup_s, saving_per_step_s, batch, n, n_int + 1, n * batch)


@dataclass(frozen=True, slots=True)
class MigrationCatchUp:
    state_bytes: float  # S0 at the start of the copy
    growth_bytes_per_s: float  # g: KV the source keeps appending
    link_bytes_per_s: float  # B
    closing_rate_bytes_per_s: float  # B − g
    catch_up_s: float | None  # S0/(B − g); None when B ≤ g (the gap never closes)
    added_bytes: float | None  # g × catch-up time
    copied_bytes: float | None  # S0 + added

    def to_dict(self) -> dict:
        return _dict(self)


def decode_growth_bytes_per_s(decode_calls_per_s: float, kv_bytes_per_token: float) -> float:
    """A decode worker appends one token of KV per decode call: g = r_D × KV/token
    (§9.6.2: H20, 1166 calls/s × 144 KiB ≈ 0.172 GB/s)."""
    non_negative(_OWNER, "decode_calls_per_s", decode_calls_per_s)
    positive(_OWNER, "kv_bytes_per_token", kv_bytes_per_token)
    return decode_calls_per_s * kv_bytes_per_token


def migration_catch_up(state_bytes: float, growth_bytes_per_s: float, link_bytes_per_s: float) -> MigrationCatchUp:
    """Background copy of a growing state: t = S0/(B − g) (§9.6.2, Fig. 9-43: 41.1 GB, 0.172 GB/s growth ->
    1.65 s over 25 GB/s with 0.28 GB added, 6.76 s over 6.25 GB/s). At B ≤ g the lines are parallel or diverge."""
    non_negative(_OWNER, "state_bytes", state_bytes)
    non_negative(_OWNER, "growth_bytes_per_s", growth_bytes_per_s)
    positive(_OWNER, "link_bytes_per_s", link_bytes_per_s)
    closing = link_bytes_per_s - growth_bytes_per_s
    if closing <= 0:
        return MigrationCatchUp(state_bytes, growth_bytes_per_s, link_bytes_per_s, closing, None, None, None)
    t = state_bytes / closing
    return MigrationCatchUp(state_bytes, growth_bytes_per_s, link_bytes_per_s, closing, t, growth_bytes_per_s * t,
                            state_bytes + growth_bytes_per_s * t)


@dataclass(frozen=True, slots=True)
class Reconfiguration:
    name: str
    payload_bytes: float  # bytes the slowest sender moves
    link_bytes_per_s: float
    transfer_s: float  # payload / bandwidth
    serial_prep_s: float  # groups, graphs, resume: after the transfer
    total_s: float  # transfer + serial prep
    prep_share: float  # serial prep / total

    def to_dict(self) -> dict:
        return _dict(self)


def reconfiguration_time(name: str, payload_bytes: float, link_bytes_per_s: float, serial_prep_s: float) -> Reconfiguration:
    """T = V/B + T_prep (§9.6.2, TP4 -> TP8 of Qwen3-8B: 16.4 GB over 6.25 / 25 GB/s = 2.63 / 0.66 s, plus 9 s of
    serial preparation = 11.6 / 9.7 s; 4.7 GB per NVLink sender at 300 GB/s ≈ 15.7 ms -> ≈ 9.0 s)."""
    non_negative(_OWNER, "payload_bytes", payload_bytes)
    positive(_OWNER, "link_bytes_per_s", link_bytes_per_s)
    non_negative(_OWNER, "serial_prep_s", serial_prep_s)
    t = payload_bytes / link_bytes_per_s
    total = t + serial_prep_s
    return Reconfiguration(name, payload_bytes, link_bytes_per_s, t, serial_prep_s, total, serial_prep_s / total if total else 0.0)


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    input_tokens: int
    delivered_output_tokens: int  # already streamed to the user
    logged_output_tokens: int  # durably in the token WAL
    kv_checkpoint_tokens: int  # context the saved KV covers
    context_to_rebuild_tokens: int  # input + logged − 1: the KV needed before feeding the last logged token
    replay_tokens: int  # prefilled from the log on top of the checkpoint
    resample_tokens: int  # delivered but not logged: cannot be reproduced, the suffix may differ
    continue_from_token: int  # the logged output token fed as the next decode input (1-based)

    def to_dict(self) -> dict:
        return _dict(self)


def recovery_plan(input_tokens: int, delivered_output_tokens: int, logged_output_tokens: int, kv_checkpoint_tokens: int) -> RecoveryPlan:
    """The token log says which sequence to continue, the KV checkpoint how much to recompute (§9.6.3, Fig. 9-44).

    To resume after m logged output tokens the KV must cover input + m − 1 tokens; the m-th token is the
    next decode input. Replay = that − checkpoint in one prefill (8192 + 1025 − 1 − 8192 = 1024 tokens,
    rebuilding 9216); 0 with a compatible checkpoint of 9216. Delivered-but-unlogged tokens must be resampled.
    """
    positive_int(_OWNER, "input_tokens", input_tokens)
    non_negative_int(_OWNER, "delivered_output_tokens", delivered_output_tokens)
    non_negative_int(_OWNER, "logged_output_tokens", logged_output_tokens)
    non_negative_int(_OWNER, "kv_checkpoint_tokens", kv_checkpoint_tokens)
    # the WAL is written before a token is acknowledged, so it may run ahead of delivery: continue from the log
    if logged_output_tokens == 0:
        ctx = input_tokens - 1  # the last input token is the first thing recomputed
        next_tok = 0
    else:
        ctx = input_tokens + logged_output_tokens - 1
        next_tok = logged_output_tokens
    if kv_checkpoint_tokens > input_tokens + logged_output_tokens:
        raise HarnessError(
            f"{_OWNER}: kv_checkpoint_tokens ({kv_checkpoint_tokens}) exceeds input + logged output "
            f"({input_tokens + logged_output_tokens}); a checkpoint cannot cover tokens the log does not have."
        )
    replay = max(0, ctx - kv_checkpoint_tokens)
    return RecoveryPlan(input_tokens, delivered_output_tokens, logged_output_tokens, kv_checkpoint_tokens, ctx, replay,
                        max(0, delivered_output_tokens - logged_output_tokens), next_tok)
