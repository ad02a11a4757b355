"""The chapter's request mixes, built into workload artifacts with a schedule.

Chapter 9: the 8192-in / 1025-out reasoning request (§9.2.3, example 9.2); a 6144-token shared
prefix (§9.2.4); 129-token outputs (§9.2.4); a 1025/4097 output mix; multi-turn sessions with 10 s
tool pauses (§9.1.3); a startup burst of λ·T_s requests at once (§9.6.1); and trace replay (Mooncake, BurstGPT, Azure).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from harness.errors import HarnessError
from workloads.artifact import APIS, WorkloadArtifact
from workloads.mooncake import expand_prompt
from workloads.prompts import TokenizerText, prompt_text, synthetic_words
from workloads.schedule import Schedule, burst, trace
from workloads.traces import TraceSelection, read_selected

MIXES = ("reasoning", "prefix-6144", "short-output", "mix-1025-4097", "multi-turn", "startup-burst", "scenario", "mooncake")


def _row(i: int, session: int, turn: int, t: float, pause: float, api: str, prompt: str, n_in: int, n_out: int,
         group: int = -1, prefix: int = 0) -> dict[str, Any]:
    return {"request_index": i, "session_id": session, "turn": turn, "intended_s": float(t), "pause_before_s": float(pause),
            "api": api, "prompt": prompt, "prompt_tokens_target": int(n_in), "max_tokens": int(n_out),
            "prefix_group": int(group), "prefix_tokens": int(prefix)}


def single_turn(name: str, schedule: Schedule, *, input_tokens: int, output_tokens: int | Callable[[int], int],
                prefix_tokens: int = 0, api: str = "chat", seed: int = 0, tokenizer: TokenizerText | None = None,
                meta: dict[str, Any] | None = None) -> WorkloadArtifact:
    """One request per schedule instant; a non-zero `prefix_tokens` makes every prompt start with the same text."""
    if api not in APIS:
        raise HarnessError(f"api must be one of {', '.join(APIS)}, got {api!r}.")
    if not 0 <= prefix_tokens < input_tokens:
        raise HarnessError(f"prefix_tokens must be in [0, input_tokens) = [0, {input_tokens}), got {prefix_tokens!r}.")
    prefix = prompt_text(prefix_tokens, seed * 7919 + 1, tokenizer) if prefix_tokens else ""
    rows = []
    for i, t in enumerate(schedule.intended_s):
        body = prompt_text(input_tokens - prefix_tokens, seed * 1_000_003 + i + 17, tokenizer)
        text = f"{prefix} {body}" if prefix else body
        n_out = output_tokens(i) if callable(output_tokens) else output_tokens
        rows.append(_row(i, i, 0, t, 0.0, api, text, input_tokens, n_out, 0 if prefix_tokens else -1, prefix_tokens))
    return WorkloadArtifact(name, rows, {"mix": name, "seed": seed, "schedule": schedule.to_dict(),
                                         "tokenizer": tokenizer.path if tokenizer else "synthetic-words", **(meta or {})})


def multi_turn(schedule: Schedule, *, turns: int = 4, first_input_tokens: int = 2048, turn_input_tokens: int = 256,
               output_tokens: int = 129, pause_s: float = 10.0, api: str = "chat", seed: int = 0,
               tokenizer: TokenizerText | None = None) -> WorkloadArtifact:
    """Sessions start at the schedule's instants; each later turn resends the history (earlier prompts and a
    synthetic stand-in of the earlier outputs) plus new text, `pause_s` after the previous turn ended."""
    if turns < 1:
        raise HarnessError(f"turns must be >= 1, got {turns!r}.")
    if not pause_s >= 0:
        raise HarnessError(f"pause_s must be >= 0, got {pause_s!r}.")
    rows = []
    i = 0
    for s, t in enumerate(schedule.intended_s):
        history = prompt_text(first_input_tokens, seed * 1_000_003 + s, tokenizer)
        n_hist = first_input_tokens
        for k in range(turns):
            if k:
                reply = synthetic_words(output_tokens, seed * 31 + s * 101 + k)  # stands in for the model's earlier answer
                new = prompt_text(turn_input_tokens, seed * 1_000_003 + s * 1009 + k, tokenizer)
                history = f"{history} {reply} {new}"
                n_hist += output_tokens + turn_input_tokens
            rows.append(_row(i, s, k, t if k == 0 else math.nan, pause_s if k else 0.0, api, history, n_hist, output_tokens, s, 0))
            i += 1
    return WorkloadArtifact("multi-turn", rows, {"mix": "multi-turn", "seed": seed, "turns": turns, "pause_s": pause_s,
                                                  "schedule": schedule.to_dict(),
                                                  "tokenizer": tokenizer.path if tokenizer else "synthetic-words"})


def mooncake(path: str, *, time_scale: float = 1.0, max_requests: int | None = None, api: str = "chat", seed: int = 0,
             tokenizer: TokenizerText | None = None) -> WorkloadArtifact:
    return trace_replay(path, fmt="mooncake", selection=TraceSelection(time_scale=time_scale, max_requests=max_requests),
                        api=api, seed=seed, tokenizer=tokenizer)


def trace_replay(path: str, *, fmt: str | None = None, selection: TraceSelection = TraceSelection(), api: str = "chat",
                 seed: int = 0, tokenizer: TokenizerText | None = None) -> WorkloadArtifact:
    """A trace (Mooncake, BurstGPT, Azure; workloads.traces) replayed at its own instants, windowed, scaled and capped."""
    sel = read_selected(path, fmt, selection)
    sched = trace(sel.intended_s, 1.0, seed)  # already scaled (and capped) by read_selected
    rows = []
    for i, r in enumerate(sel.requests):
        shared = r.hash_ids[0] if r.hash_ids else -1
        rows.append(_row(i, i, 0, sched.intended_s[i], 0.0, api, expand_prompt(r, tokenizer, seed + i), r.input_length,
                         r.output_length, shared, 0))
    return WorkloadArtifact(sel.format, rows, {"mix": sel.format, **sel.meta, "seed": seed, "schedule": sched.to_dict(),
                                               "tokenizer": tokenizer.path if tokenizer else "synthetic-words"})


def build_mix(mix: str, schedule: Schedule, *, seed: int = 0, api: str = "chat", tokenizer: TokenizerText | None = None,
              input_tokens: int | None = None, output_tokens: int | None = None, prefix_tokens: int = 0,
              **params: Any) -> WorkloadArtifact:
    """A named mix on `schedule`. For "scenario" the token counts default to the chapter's request (8192 in /
    1025 out); for "multi-turn" output_tokens defaults to 129 and the other turn sizes come from `params`."""
    kw = dict(api=api, seed=seed, tokenizer=tokenizer)
    if mix == "reasoning":
        return single_turn("reasoning", schedule, input_tokens=8192, output_tokens=1025, **kw)
    if mix == "prefix-6144":
        return single_turn("prefix-6144", schedule, input_tokens=8192, output_tokens=1025, prefix_tokens=6144, **kw)
    if mix == "short-output":
        return single_turn("short-output", schedule, input_tokens=8192, output_tokens=129, **kw)
    if mix == "mix-1025-4097":
        rng = np.random.default_rng(seed + 4097)
        long = rng.random(schedule.count) < float(params.get("long_fraction", 0.5))
        return single_turn("mix-1025-4097", schedule, input_tokens=8192, output_tokens=lambda i: 4097 if long[i] else 1025,
                           meta={"long_fraction": float(params.get("long_fraction", 0.5))}, **kw)
    if mix == "multi-turn":
        extra = {k: v for k, v in params.items() if k in ("turns", "first_input_tokens", "turn_input_tokens", "pause_s")}
        return multi_turn(schedule, output_tokens=output_tokens or 129, **extra, **kw)
    if mix == "startup-burst":
        return single_turn("startup-burst", schedule, input_tokens=8192, output_tokens=1025, **kw)
    if mix == "scenario":
        return single_turn("scenario", schedule, input_tokens=input_tokens or 8192, output_tokens=output_tokens or 1025,
                           prefix_tokens=prefix_tokens, **kw)
    if mix == "mooncake":
        if "trace" not in params:
            raise HarnessError("mix 'mooncake' needs trace=PATH (a Mooncake JSONL file).")
        return mooncake(params["trace"], time_scale=float(params.get("time_scale", 1.0)), max_requests=params.get("max_requests"), **kw)
    raise HarnessError(f"mix {mix!r} is unknown; known: {', '.join(MIXES)}.")


def startup_burst_schedule(rate_per_s: float, startup_s: float, duration_s: float, seed: int = 0) -> Schedule:
    """λ·T_s requests at once (the backlog at readiness, §9.6.1: 3.5 × 10 = 35), then Poisson at λ."""
    return burst(int(round(rate_per_s * startup_s)), rate_per_s, duration_s, seed)
