"""The loop's stage-window step: the isolated requests sent to the engine in one stage window (prefill, decode at each
batch, the long-context decodes, the prompts at the mixes' other lengths and beside decodes, the prompt cache's copy
cases), and the same requests as groups the time budget predicts a window from."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Callable, Sequence

from harness.loop.budget import StageGroup
from harness.loop.measure import measure_decode, measure_mixed_prompts, measure_prefill, measure_prompt_saves, measure_prompts
from harness.loop.options import LoopPlan
from harness.loop.state import EngineTarget
from harness.loop_records.stages import StageMeasurement
from harness.target.llama_server import LlamaServerSettings
from harness.target.stage_requests import MIXED_PROMPT_SLOT, PREFILL_DECODE_TOKENS, SAVE_PROBE_TOKENS, RequestCheck

MIXED_DECODE_MARGIN_S = 0.5  # the mixed-prompt decodes outlast twice the prompt's time alone by this much


def measure_stage_window(eng: EngineTarget, plan: LoopPlan, sched: LlamaServerSettings, window: int = 0,
                         measured: list[StageMeasurement] | None = None, checks: list[RequestCheck] | None = None,
                         spent: dict[str, float] | None = None) -> tuple[list[StageMeasurement], list[RequestCheck]]:
    """One stage window: the isolated prefill, the decode at each batch (with the long-context decode interleaved at
    batch 1 and the largest), the prompts at the served mixes' other lengths, the prompts beside decodes, and the
    prompt-cache copy (when the engine keeps one, window 0 only, `LoopPlan.copy_cases`); returns (stage measurements,
    request checks labelled `window`). Given lists are extended as each part is measured (a failure midway keeps what
    was). `spent` gets the seconds each part took (harness.loop.budget.later_window_s reads them): "prefill_s",
    "decode_s", "long_decode_s", "side_s" and "copy_cases_s"."""
    measured = [] if measured is None else measured
    checks = [] if checks is None else checks
    n0, k0 = len(measured), len(checks)
    spent = {} if spent is None else spent
    t_part = time.perf_counter()
    shape, vocab = plan.shape, int(eng.vocab or 0)

    def took(part: str) -> None:
        nonlocal t_part
        now = time.perf_counter()
        spent[part] = spent.get(part, 0.0) + now - t_part
        t_part = now

    def keep(cs: Sequence[RequestCheck]) -> None:
        checks.extend(replace(c, window=window) for c in cs)

    reps = plan.window_reps(window)
    ms, cs = measure_prefill(eng.url, eng.served_name, shape.prompt_tokens, vocab, reps, eng.pid, eng.threads)
    measured += ms
    keep(cs)
    took("prefill_s")
    top = max(plan.batches)
    n_long = max(1, reps - 1)

    def long_decode(bsz: int) -> Callable[[int], None]:
        """The context correction's long-context decode at batch `bsz` (1 and the largest), after long prompts: one rep
        after each of the first `n_long` reps of the short-context decode at that batch (short, long, short, long,
        short), so that the difference it is read from is measured seconds apart, not a minute."""
        def after(rep: int) -> None:
            if rep < n_long:
                eng.alive()
                took("decode_s")
                _, lc = measure_decode(eng.url, eng.served_name, bsz, shape.prompt_tokens, 1 + PREFILL_DECODE_TOKENS, vocab, 1,
                                       eng.pid, eng.threads, phase="longdecode", rep0=rep)
                keep(lc)
                took("long_decode_s")
        return after

    for bsz in plan.batches:
        eng.alive()
        m, cs = measure_decode(eng.url, eng.served_name, bsz, shape.decode_prompt_tokens, shape.output_tokens, vocab, reps,
                               eng.pid, eng.threads, after_rep=long_decode(bsz) if bsz in (1, top) else None)
        measured.append(m)
        keep(cs)
    took("decode_s")
    more = sorted({m[0] for m in plan.mixes} - {shape.prompt_tokens, shape.decode_prompt_tokens}) if plan.served else []
    if more:  # the prefill correction's knots at the served prompt lengths the stages did not run
        eng.alive()
        keep(measure_prompts(eng.url, eng.served_name, more, vocab, plan.side_reps))
    if plan.served and mixed_batches(sched.slots):  # the mixed-iteration correction
        eng.alive()
        cases = mixed_cases(checks[k0:], sorted({m[0] for m in plan.mixes}), mixed_batches(sched.slots), shape.decode_prompt_tokens,
                            sched.n_ctx_slot, 4 * shape.output_tokens)
        keep(measure_mixed_prompts(eng.url, eng.served_name, cases, vocab, plan.side_reps, shape.decode_prompt_tokens))
    took("side_s")
    if sched.prompt_cache_ram and window == 0 and plan.copy_cases:  # the host-RAM prompt cache's copy of a slot at the
        # served mixes' shapes (window 0 only: later windows reuse it, stage_requests.window_checks)
        eng.alive()
        cases = sorted({(shape.prompt_tokens, 1 + PREFILL_DECODE_TOKENS)} | ({tuple(m) for m in plan.mixes} if plan.served else set()))
        keep(measure_prompt_saves(eng.url, eng.served_name, cases, vocab, plan.side_reps, sched.slots))
        took("copy_cases_s")
    return measured[n0:], checks[k0:]


def stage_window_groups(plan: LoopPlan, slots: int, window: int, prompt_cache_ram: bool) -> dict[str, list[StageGroup]]:
    """The requests `measure_stage_window` sends, part by part (its `spent` keys), as groups sent together: what the
    time budget predicts a window from before it runs (harness.loop.budget.window_s_from_groups). Mirrors that
    function; a test keeps the two in step by their request counts. The mixed-prompt cases' decodes are sized to
    outlast their prompt, which ends the group."""
    reps, sh, K = plan.window_reps(window), plan.shape, PREFILL_DECODE_TOKENS
    P, D = sh.prompt_tokens, sh.decode_prompt_tokens
    top = max(plan.batches)
    parts: dict[str, list[StageGroup]] = {"prefill_s": [StageGroup(((P, 1 + K),))] * reps}
    parts["decode_s"] = [StageGroup(((D, sh.output_tokens),) * b) for b in plan.batches for _ in range(reps)]
    parts["long_decode_s"] = [StageGroup(((P, 1 + K),) * b) for b in plan.batches if b in (1, top)
                              for _ in range(max(1, reps - 1))]
    side: list[StageGroup] = []
    if plan.served:
        more = sorted({m[0] for m in plan.mixes} - {P, D})
        side += [StageGroup(((n, 1),)) for n in more for _ in range(plan.side_reps)]
        for p in sorted({m[0] for m in plan.mixes}):
            for b in mixed_batches(slots):
                n = 4 * sh.output_tokens  # outlasts the prompt (mixed_cases' fallback); the group ends with the prompt
                side += [StageGroup(((p, 1),)), StageGroup(((D, n),) * b + ((p, 1),), ends_with=b)] * plan.side_reps
    parts["side_s"] = side
    if prompt_cache_ram and window == 0 and plan.copy_cases:
        small = StageGroup(((SAVE_PROBE_TOKENS, 1),))
        cases = sorted({(P, 1 + K)} | ({tuple(m) for m in plan.mixes} if plan.served else set()))
        parts["copy_cases_s"] = [small] * (2 * slots) + [g for _ in range(plan.side_reps) for c in cases
                                                        for g in [StageGroup((c,))] + [small] * slots]
    return parts


def mixed_batches(slots: int) -> tuple[int, ...]:
    """The decode batches the mixed-prompt measurement runs beside a prompt: one decoding slot and every other slot."""
    return tuple(sorted({1, slots - 1})) if slots > MIXED_PROMPT_SLOT else ()


def mixed_cases(checks: Sequence[RequestCheck], lengths: Sequence[int], batches: Sequence[int], decode_prompt_tokens: int,
                n_ctx_slot: int, fallback_tokens: int) -> list[tuple[int, int, int]]:
    """(prompt tokens P, decode batch B, decode output tokens N) for `measure_mixed_prompts`: N keeps the decodes
    generating until the prompt is done, sized from this window's own measurements (the engine's median prompt time of
    P tokens alone and the client's decode step at the nearest measured batch at or above B, else the largest):
    2 × that time + MIXED_DECODE_MARGIN_S, over the step, plus 8; `fallback_tokens` when the window measured neither; at
    most what the slot's context holds."""
    ok = [c for c in checks if not c.error]
    steps: dict[int, list[float]] = {}
    for c in ok:
        if c.phase.startswith("decode@") and (st := c.client_step_s) is not None:
            steps.setdefault(int(c.phase.split("@", 1)[1]), []).append(st)
    out = []
    for p in lengths:
        alone = [c.engine_prompt_s for c in ok if c.phase in ("prefill", "prompt", "decode@1") and c.engine_prompt_tokens == p
                 and c.engine_prompt_s is not None]
        for b in batches:
            at = min((x for x in steps if x >= b), default=max(steps, default=None))
            step = statistics.median(steps[at]) if at is not None else 0.0
            n = (math.ceil((2.0 * statistics.median(alone) + MIXED_DECODE_MARGIN_S) / step) + 8 if alone and step > 0
                 else fallback_tokens)
            out.append((int(p), int(b), max(2, min(n, n_ctx_slot - decode_prompt_tokens - 1))))
    return out


__all__ = ["MIXED_DECODE_MARGIN_S", "measure_stage_window", "mixed_batches", "mixed_cases", "stage_window_groups"]
