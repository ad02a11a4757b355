"""The twin's stage corrections: what llama-server's twin misses of the engine, fitted from the isolated stage
requests alone (harness.target.stage_requests; calibration subset "stages": no served measurement enters them).

`corrected_twin` applies them in order: the request overhead (client TTFT − the engine's prompt time), the host-RAM
prompt cache's copy of a slot (`prompt_save`), the server-loop iteration correction by decode batch
(`iteration_overhead_s`), the decode step's growth with context (`context_correction`), the prefill correction by prompt
micro-batch length (`prefill_correction_s`) and the mixed-iteration correction by decode batch and prompt tokens
(`mixed_correction`); the last two are solved (`solve_knots`) so that the twin's own simulation of each measured request
takes the engine's time. `combine` takes several stage windows' corrected twins to one whose every correction is the
median over the windows; `correction_summary` lists the cells with each window's value (docs/loop-cpu.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from harness.calibration.step_time import nnls
from harness.target.des import ArrivingRequest, simulate
from harness.target.llama_server import interpolate_grid, interpolate_knots
from harness.target.stage_requests import (MIXED_PROMPT_SLOT, PREFILL_DECODE_TOKENS, SAVE_PROBE_TOKENS, RequestCheck, StageShape,
                                           mixed_alone_prompt_s, mixed_decode_slots, parse_mixed_phase)
from harness.target.twin import TwinSpec


@dataclass(frozen=True)
class IterationOverhead:
    """What one server-loop iteration costs beyond the twin's step time, from the isolated decode (calibration subset
    "stages"): per batch B, the client's decode step (first to last chunk over the chunks between) minus the twin's
    step time for B sequences at the mean context. The twin applies `per_batch_s` to an iteration by its decode batch
    (LlamaServerSettings.decode_correction_by_batch_s: a correction of the step-time fit at that B, which may be
    negative); `value_s`, the median over B floored at 0, to iterations without a decode token."""

    value_s: float
    per_batch_s: tuple[tuple[int, float], ...]


def decode_context_tokens(decode_prompt_tokens: int, output_tokens: int) -> float:
    """The mean context of the isolated decode's steps (its prompt, then half its output)."""
    return decode_prompt_tokens + (output_tokens - 1) / 2.0


def iteration_overhead_s(checks: Sequence[RequestCheck], step_times: Any, decode_prompt_tokens: int,
                         output_tokens: int) -> IterationOverhead | None:
    """None when no isolated decode request measured a step (fewer than two chunks, or failed)."""
    by_b: dict[int, list[float]] = {}
    for c in checks:
        step = c.client_step_s if c.phase.startswith("decode@") and not c.error else None
        if step is None:
            continue
        by_b.setdefault(int(c.phase.split("@", 1)[1]), []).append(step)
    if not by_b:
        return None
    context = decode_context_tokens(decode_prompt_tokens, output_tokens)
    per_b = tuple((b, statistics.median(v) - step_times.decode_step_time_s(b, context)) for b, v in sorted(by_b.items()))
    return IterationOverhead(max(0.0, statistics.median(x for _, x in per_b)), per_b)


@dataclass(frozen=True)
class ContextCorrection:
    """What the step-time source misses of the decode step's growth with context, from the isolated requests
    (calibration subset "stages"), per decode batch B: the client step after long prompts (the "longdecode@B" requests,
    at batch 1 and the largest, each interleaved with that batch's short reps; a run stored before batch 1 had its own:
    the prefill phase's requests, which decode PREFILL_DECODE_TOKENS tokens alone) minus the twin's step there, less
    the same residual at the short context of the batch-B decode, per context token of each of the B sequences. `s_per_token_by_batch` feeds LlamaServerSettings.decode_context_s_per_token_by_batch; it applies
    to each decode sequence's context beyond `ref_tokens` (where the batch correction was measured)."""

    s_per_token_by_batch: tuple[tuple[int, float], ...]
    ref_tokens: float
    long_tokens: float
    residuals_s: tuple[tuple[int, float, float], ...]  # (B, long-context residual, short-context residual)


def context_correction(checks: Sequence[RequestCheck], step_times: Any, prompt_tokens: int, decode_prompt_tokens: int,
                       output_tokens: int) -> ContextCorrection | None:
    """None when no batch has a step at both contexts, or the two contexts are too close to tell apart. The short-context
    residual per batch is the batch correction's (`iteration_overhead_s`), measured at the same context."""
    short = iteration_overhead_s(checks, step_times, decode_prompt_tokens, output_tokens)
    ctx_long = prompt_tokens + (PREFILL_DECODE_TOKENS - 1) / 2.0
    ctx_ref = decode_context_tokens(decode_prompt_tokens, output_tokens)
    if short is None or ctx_long - ctx_ref < 64:
        return None
    by_b = dict(short.per_batch_s)
    batches = sorted({1} | {int(c.phase.split("@", 1)[1]) for c in checks if c.phase.startswith("longdecode@")})
    paired_1 = any(c.phase == "longdecode@1" for c in checks)  # else a run stored before batch 1 was paired
    pairs, res = [], []
    for b in batches:
        long_phases = (f"longdecode@{b}",) if b != 1 or paired_1 else ("prefill",)
        steps = [st for c in checks if c.phase in long_phases and not c.error and (st := c.client_step_s) is not None]
        if not steps or b not in by_b:
            continue
        a, r = statistics.median(steps) - step_times.decode_step_time_s(b, ctx_long), by_b[b]
        pairs.append((b, (a - r) / (b * (ctx_long - ctx_ref))))
        res.append((b, a, r))
    if not pairs:
        return None
    return ContextCorrection(tuple(pairs), ctx_ref, ctx_long, tuple(res))


@dataclass(frozen=True)
class PromptSave:
    """llama-server's host-RAM prompt-cache copy of a slot state, from the isolated requests (calibration subset
    "stages", `measure_prompt_saves`): per (prompt, output) case, the median over reps of the summed TTFT outside the
    engine's prompt time of the small requests after it, less as many baseline requests'; fitted as
    `per_prompt_s` × prompt tokens + `per_generated_s` × generated tokens (output − 1 in the slot), both >= 0.
    `baseline_s` is the median baseline request's TTFT outside the prompt time: the request overhead without a copy."""

    per_prompt_s: float
    per_generated_s: float
    baseline_s: float
    n_baseline: int  # baseline requests
    knots: tuple[tuple[int, int, float], ...]  # (prompt tokens, generated tokens, measured seconds)

    def predicted_s(self, prompt_tokens: int, generated_tokens: int) -> float:
        return self.per_prompt_s * prompt_tokens + self.per_generated_s * generated_tokens


def prompt_save(checks: Sequence[RequestCheck]) -> PromptSave | None:
    """None without baseline requests or cases."""

    base = [c.ttft_minus_engine_prompt_s for c in checks if c.phase == "savebase" and not c.error
            and c.ttft_minus_engine_prompt_s is not None]
    if not base:
        return None
    b = statistics.median(base)
    sums: dict[tuple[int, int], dict[int, list[float]]] = {}
    for c in checks:
        if c.phase.startswith("save@") and not c.error and c.ttft_minus_engine_prompt_s is not None:
            p, o = (int(x) for x in c.phase.split("@", 1)[1].split("/"))
            sums.setdefault((p, o), {}).setdefault((c.window, c.rep), []).append(c.ttft_minus_engine_prompt_s - b)
    knots = tuple((p, max(0, o - 1), statistics.median(sum(v) for v in reps.values())) for (p, o), reps in sorted(sums.items()))
    if not knots:
        return None

    per_p, per_g = (float(x) for x in nnls(np.array([[k[0], k[1]] for k in knots], dtype=float), np.array([k[2] for k in knots])))
    return PromptSave(per_p, per_g, max(0.0, b), len(base), knots)


def prompt_alone_s(twin: TwinSpec, prompt_tokens: int, slot: int | None = None) -> float:
    """The twin's own prompt time for one request of `prompt_tokens` tokens sent to an idle engine (in `slot` when
    given, as the mixed-prompt measurement's alone prompts are): its first token's instant minus its arrival and the
    request overhead (what llama-server's `timings.prompt_ms` measures), simulated with every split (checkpoints, -ub)
    and per-iteration correction the twin applies."""

    run = simulate(twin.make_scheduler, [ArrivingRequest(0.0, int(prompt_tokens), 1, slot=slot)])
    return float(run.first_token_s[0] - run.arrival_s[0]) - float(getattr(twin.settings, "request_overhead_s", 0.0))


def prefill_correction_s(checks: Sequence[RequestCheck], twin: TwinSpec) -> tuple[tuple[int, float], ...]:
    """Per prompt length of the isolated requests whose prompt ran alone (calibration subset "stages": the prefill
    phase's, the batch-1 decode's and the "prompt" requests at the served mixes' other lengths), the seconds to add to a prompt micro-batch of that length (linear between,
    the nearest outside: LlamaServerSettings.prefill_correction_by_tokens_s) so that the twin's own simulation of
    each such prompt alone (`prompt_alone_s`) takes the engine's median prompt time; empty when none measured it.

    Solved, not differenced: the twin runs a prompt as several micro-batches (a sliding-window model's checkpoints
    break a 32-token prompt into 28 + 4 tokens, each a pass over the weights) and adds its iteration correction to
    each, so "engine − prefill_time_s(n)" added per micro-batch counted those twice (the 2026-12-01 20:34 run's twin
    took 279 ms for the 32-token prompt the engine ran in 172 ms). The simulated time is linear in the correction's
    values at the measured lengths, so W·c = measured − simulated(0) gives them (least squares when a knot is longer
    than any micro-batch, e.g. 512 with -ub 128); two refinement passes absorb the clamps (an iteration never takes
    less than zero)."""

    by_n: dict[int, list[float]] = {}
    for c in checks:
        if c.phase not in ("prefill", "decode@1", "prompt") or c.error or c.engine_prompt_s is None or not c.engine_prompt_tokens:
            continue
        by_n.setdefault(int(c.engine_prompt_tokens), []).append(float(c.engine_prompt_s))
    if not by_n or twin.engine != "llama.cpp":
        return ()
    knots = sorted(by_n)

    def simulated(values: Sequence[float]) -> np.ndarray:
        t = replace(twin, settings=replace(twin.settings, prefill_correction_by_tokens_s=tuple(zip(knots, map(float, values)))))
        return np.array([prompt_alone_s(t, n) for n in knots])

    return solve_knots(knots, [statistics.median(by_n[n]) for n in knots], simulated)


def mixed_prompt_s(twin: TwinSpec, decode_prompt_tokens: int, decode_output_tokens: int, prompt_tokens: int, batch: int,
                   delay_s: float, decode_first_s: float | None = None) -> float:
    """The twin's own prompt time (llama-server's `timings.prompt_ms`: from the iteration that batches the prompt's first
    chunk to the end of the one with its last) for a `prompt_tokens` prompt in slot MIXED_PROMPT_SLOT sent `delay_s`
    after the last first token of `batch` decode requests (`decode_prompt_tokens` each, generating
    `decode_output_tokens`) that arrived at 0 in `mixed_decode_slots(batch)`: the scenario `measure_mixed_prompts`
    measures. `decode_first_s`: that last first token, when already simulated."""

    decs = [ArrivingRequest(0.0, int(decode_prompt_tokens), int(decode_output_tokens), slot=s) for s in mixed_decode_slots(batch)]
    if decode_first_s is None:
        decode_first_s = float(max(simulate(twin.make_scheduler, decs).first_token_s))
    run = simulate(twin.make_scheduler, [*decs, ArrivingRequest(decode_first_s + delay_s, int(prompt_tokens), 1, slot=MIXED_PROMPT_SLOT)])
    return float(run.first_token_s[-1] - run.prompt_start_s[-1])  # type: ignore[index]


@dataclass(frozen=True)
class MixedCorrection:
    """What the twin misses of an iteration that carries a prompt chunk beside decode tokens, from the prompts sent while
    other slots decode (calibration subset "stages", `measure_mixed_prompts`): per (decode batch B, prompt length P),
    the engine's median prompt time beside the decodes (`measured_s`) and alone just before them (`alone_s`, NaN where
    not measured), the twin's own figure it was solved to meet (`target_s`: its own time for the prompt alone plus the
    engine's median extra over the alone prompt just before, where measured; else the engine's time beside the decodes)
    and the twin's simulation of the same requests before this correction (`twin_s`); `per_cell_s`,
    LlamaServerSettings.mixed_correction_by_batch_tokens_s, solved so the twin meets `target_s`. `n_paired` of the
    `n_requests` prompts had their alone prompt."""

    per_cell_s: tuple[tuple[int, int, float], ...]
    measured_s: tuple[tuple[int, int, float], ...]
    twin_s: tuple[tuple[int, int, float], ...]
    n_requests: int
    alone_s: tuple[tuple[int, int, float], ...] = ()
    target_s: tuple[tuple[int, int, float], ...] = ()
    n_paired: int = 0


def mixed_correction(checks: Sequence[RequestCheck], twin: TwinSpec) -> MixedCorrection | None:
    """Solved like the prefill correction (`solve_knots`), one decode batch at a time (an iteration with B decode tokens
    reads B's row): the row's values at the measured prompt lengths, read by an iteration's prompt tokens (linear
    between, nearest outside), such that the twin's simulation of each measured mixed prompt (`mixed_prompt_s`, at its
    own send delay; the median over the requests of each (B, P)) takes its target: the twin's own time for the prompt
    alone in its slot (`prompt_alone_s`, which carries the prefill correction) plus what the engine took beside the decodes over
    the same-length prompt alone just before them (phase "mixedalone", same window and rep). Differenced seconds apart,
    the host's drift over the window cancels; the absolute time beside the decodes against a prefill correction
    measured a minute earlier did not (the 2026-12-02 18:52 run solved B=1 512 tokens to +333 ms from windows 244 and
    332 ms slower beside one decode than the window's prefill alone, and one 203 ms faster). A prompt without its alone
    request (a run stored before it) is taken absolute. None when nothing was measured, the engine is not llama.cpp or
    it has too few slots."""

    if twin.engine != "llama.cpp" or twin.settings.slots <= MIXED_PROMPT_SLOT:
        return None
    decodes: dict[tuple[int, int, int, int], list[Any]] = {}
    alone = mixed_alone_prompt_s(checks)
    for c in checks:
        ph = parse_mixed_phase(c.phase)
        if ph and ph[0] == "mixeddecode" and not c.error:
            decodes.setdefault((c.window, c.rep, ph[1], ph[2]), []).append(c)
    # (B, P) -> (decode prompt, output, delay, engine s beside the decodes, engine s alone just before or None)
    cases: dict[tuple[int, int], list[tuple[int, int, float, float, float | None]]] = {}
    for c in checks:
        ph = parse_mixed_phase(c.phase)
        if not ph or ph[0] != "mixed" or c.error or c.engine_prompt_s is None or c.sent_after_s is None:
            continue
        _, p, b = ph
        ds = decodes.get((c.window, c.rep, p, b)) or []
        if len(ds) != b or any(d.client_ttft_s is None for d in ds) or b >= twin.settings.slots:
            continue
        # a decode stopped once the prompt was done asked for max_tokens: the twin's decodes ask as many (only the
        # iterations up to the prompt's end count, and those it had run)
        n_out = ds[0].max_tokens if ds[0].stopped else (ds[0].usage_completion_tokens or ds[0].engine_predicted_tokens)
        n_in = ds[0].engine_prompt_tokens or ds[0].usage_prompt_tokens
        if not n_out or not n_in:
            continue
        cases.setdefault((b, p), []).append((int(n_in), int(n_out), max(0.0, c.sent_after_s - max(d.client_ttft_s for d in ds)),
                                             float(c.engine_prompt_s), alone.get((c.window, c.rep, p, b))))
    if not cases:
        return None

    firsts = {(b, dp, n): float(max(simulate(twin.make_scheduler, [ArrivingRequest(0.0, dp, n, slot=s) for s in mixed_decode_slots(b)]).first_token_s))
              for (b, _), v in cases.items() for dp, n, _, _, _ in v}
    twin_alone = {p: prompt_alone_s(twin, p, MIXED_PROMPT_SLOT) for _, p in cases}
    cells, measured, before, alone_med, targets = [], [], [], [], []
    for b in sorted({b for b, _ in cases}):
        knots = sorted(p for bb, p in cases if bb == b)

        def simulated(values: Sequence[float], b: int = b, knots: list[int] = knots) -> np.ndarray:
            grid = tuple((bb, k, x) for bb, k, x in cells) + tuple((b, k, float(x)) for k, x in zip(knots, values))
            t = replace(twin, settings=replace(twin.settings, mixed_correction_by_batch_tokens_s=grid))
            return np.array([statistics.median(mixed_prompt_s(t, dp, n, p, b, dl, firsts[(b, dp, n)]) for dp, n, dl, _, _ in cases[(b, p)])
                             for p in knots])

        target = [statistics.median(m if a is None else twin_alone[p] + (m - a) for _, _, _, m, a in cases[(b, p)]) for p in knots]
        # the rows solved so far stay in the grid: at batch b only b's row is read (a measured batch), so they do not
        # move this row's figures, and the grid validates
        before += [(b, p, float(x)) for p, x in zip(knots, simulated([0.0] * len(knots)))]
        cells += [(b, p, x) for p, x in solve_knots(knots, target, simulated)]
        measured += [(b, p, statistics.median(x[3] for x in cases[(b, p)])) for p in knots]
        alone_med += [(b, p, statistics.median(a) if (a := [x[4] for x in cases[(b, p)] if x[4] is not None]) else math.nan)
                      for p in knots]
        targets += [(b, p, float(t)) for p, t in zip(knots, target)]
    return MixedCorrection(tuple(cells), tuple(measured), tuple(before), sum(len(v) for v in cases.values()), tuple(alone_med),
                           tuple(targets), sum(x[4] is not None for v in cases.values() for x in v))


def solve_knots(knots: Sequence[int], target: Sequence[float], simulated: Callable[[Sequence[float]], Any]) -> tuple[tuple[int, float], ...]:
    """The values at `knots` of a correction table for which `simulated(values)` (the twin's figure at each knot) meets
    `target`: the simulated times are close to linear in the values, so W·c = target − simulated(0) gives them (W by
    differences of 10 ms, least squares when a knot does not move its own figure alone), and two refinement passes
    absorb what is not linear (an iteration never takes less than zero)."""

    target_a = np.asarray(target, dtype=float)
    base = np.asarray(simulated(np.zeros(len(knots))), dtype=float)
    unit = 0.01  # seconds: small beside a prompt, large beside float noise
    w = np.column_stack([(np.asarray(simulated(np.eye(len(knots))[j] * unit)) - base) / unit for j in range(len(knots))])
    sol = np.linalg.lstsq(w, target_a - base, rcond=None)[0]
    for _ in range(2):
        resid = target_a - np.asarray(simulated(sol))
        if float(np.max(np.abs(resid))) < 1e-6:
            break
        sol = sol + np.linalg.lstsq(w, resid, rcond=None)[0]
    return tuple((int(n), float(x)) for n, x in zip(knots, sol))


def corrected_twin(twin: TwinSpec, checks: Sequence[RequestCheck], shape: StageShape) -> tuple[TwinSpec, list[str]]:
    """Calibration subset "stages": the twin corrected by the isolated requests `checks` (of one stage window:
    stage_requests.window_checks; several windows are combined by `combine`), and the notes that state each correction. The
    isolated-prefill requests give the request overhead outside the step times (client TTFT − the engine's own prompt
    time: HTTP, tokenizing, first-token streaming), and the isolated decode requests the server-loop iteration overhead
    (`iteration_overhead_s`: sampling, streaming each token, and whatever the step-time source misses at these
    batches); the prompt-cache copy, context and prefill corrections follow. No served measurement enters any of them."""
    notes: list[str] = []
    d = [c.ttft_minus_engine_prompt_s for c in checks if c.phase == "prefill" and c.ttft_minus_engine_prompt_s is not None]
    if not d or twin.engine != "llama.cpp":
        return twin, notes

    def add(note: str, **settings: Any) -> Any:
        notes.append(note)
        return replace(twin, settings=replace(twin.settings, **settings), notes=(*twin.notes, note))

    ps = prompt_save(checks) if twin.settings.prompt_cache_ram else None
    if ps is not None:
        # the isolated prefills' TTFT outside the prompt time holds the copy of the previous request's slot (38-71 ms
        # after a 512/64 request on Gemma 3 270M, 2026-12-02), which the twin now models as its own term
        overhead, how = ps.baseline_s, (f"median client TTFT − engine prompt time of {ps.n_baseline} "
                                        f"{SAVE_PROBE_TOKENS}-token requests after {SAVE_PROBE_TOKENS}-token ones, which copy no large slot state")
    else:
        overhead, how = max(0.0, statistics.median(d)), f"median client TTFT − engine prompt time of {len(d)} isolated-prefill requests"
    twin = add(f"request overhead {overhead * 1e3:.1f} ms ({how}: calibration subset 'stages')", request_overhead_s=overhead)
    if ps is not None:
        knots = "; ".join(f"{p} + {g} tokens {x * 1e3:.1f} ms (fit {ps.predicted_s(p, g) * 1e3:.1f})" for p, g, x in ps.knots)
        twin = add(f"host-RAM prompt-cache copy of a slot state at a task's launch, blocking the server loop: "
                   f"{ps.per_prompt_s * 1e6:.1f} µs a prompt token + {ps.per_generated_s * 1e6:.1f} µs a generated token "
                   f"({knots}; the small requests after each case, less the baseline): calibration subset 'stages'",
                   prompt_save_s_per_prompt_token=ps.per_prompt_s, prompt_save_s_per_generated_token=ps.per_generated_s)
    it = iteration_overhead_s(checks, twin.step_times, shape.decode_prompt_tokens, shape.output_tokens)
    if it is not None:
        per_b = ", ".join(f"B={b} {x * 1e3:+.2f} ms" for b, x in it.per_batch_s)
        twin = add(f"server-loop iteration correction by decode batch ({per_b}: the client's decode step − the twin's step "
                   f"time in the isolated decode; linear between, nearest outside) and {it.value_s * 1e3:.2f} ms for an "
                   f"iteration without decode tokens (median over B, floored at 0): calibration subset 'stages'",
                   iteration_overhead_s=it.value_s, decode_correction_by_batch_s=it.per_batch_s)
    cc = context_correction(checks, twin.step_times, shape.prompt_tokens, shape.decode_prompt_tokens, shape.output_tokens)
    if cc is not None:
        per_b = ", ".join(f"B={b} {x * 1e6:+.2f} µs" for b, x in cc.s_per_token_by_batch)
        how = "; ".join(f"B={b}: {a * 1e3:+.2f} ms at context {cc.long_tokens:.0f}, {r * 1e3:+.2f} ms at {cc.ref_tokens:.0f}"
                        for b, a, r in cc.residuals_s)
        twin = add(f"context correction per context token of each decode sequence beyond {cc.ref_tokens:.0f} ({per_b}; "
                   f"linear between the batches, nearest outside), from the client step − the twin's step after long and "
                   f"short isolated prompts ({how}): calibration subset 'stages'",
                   decode_context_s_per_token_by_batch=cc.s_per_token_by_batch, decode_context_ref_tokens=cc.ref_tokens)
    pc = prefill_correction_s(checks, twin)
    if pc:
        per_n = ", ".join(f"{n} tokens {x * 1e3:+.1f} ms" for n, x in pc)
        twin = add(f"prefill correction by prompt micro-batch length ({per_n}; linear between, nearest outside), solved so "
                   "that the twin's own simulation of each isolated prompt that ran alone (its micro-batches and iteration "
                   "corrections) takes the engine's prompt time: calibration subset 'stages'",
                   prefill_correction_by_tokens_s=pc)
    mc = mixed_correction(checks, twin)  # after the prefill correction: the twin's mixed prompts carry it
    if mc is not None:
        per = ", ".join(f"B={b} {p} tokens {x * 1e3:+.1f} ms" for b, p, x in mc.per_cell_s)
        how = "; ".join(f"B={b} {p} tokens {m * 1e3:.1f} ms" + ("" if math.isnan(a) else f" against {a * 1e3:.1f} alone just before")
                        + f", twin {t * 1e3:.1f} before, target {g * 1e3:.1f}"
                        for (b, p, m), (_, _, a), (_, _, t), (_, _, g) in zip(mc.measured_s, mc.alone_s, mc.twin_s, mc.target_s))
        twin = add(f"mixed-iteration correction by the decode batch and prompt tokens of an iteration that carries both ({per}; "
                   f"linear between, nearest outside), solved so that the twin's own simulation of each prompt sent while B "
                   f"other slots decode takes the twin's time for it alone plus the engine's extra over the same-length "
                   f"prompt alone just before ({mc.n_requests} requests, {mc.n_paired} paired; engine medians: {how}): "
                   "calibration subset 'stages'",
                   mixed_correction_by_batch_tokens_s=mc.per_cell_s)
    return twin, notes


SCALAR_CORRECTIONS = ("request_overhead_s", "iteration_overhead_s", "prompt_save_s_per_prompt_token",
                      "prompt_save_s_per_generated_token", "decode_context_ref_tokens")
KNOT_CORRECTIONS = ("decode_correction_by_batch_s", "prefill_correction_by_tokens_s", "decode_context_s_per_token_by_batch")
GRID_CORRECTIONS = ("mixed_correction_by_batch_tokens_s",)


def combine(twins: Sequence[TwinSpec], label: str = "") -> TwinSpec:
    """One llama.cpp twin whose every stage correction is the median over `twins` (each corrected by one window):
    scalars directly, knot tables at the union of their knots and grids at the union of their cells (each twin's table
    read there, linear between its knots, the nearest outside, as the twin reads it). A twin without a correction does not vote on it. The first twin's
    everything else (scheduler settings, step-time source) is kept: only the corrections differ between windows."""

    if len(twins) == 1:
        return twins[0]
    first = twins[0]
    upd: dict[str, Any] = {}
    for f in SCALAR_CORRECTIONS:
        upd[f] = float(statistics.median(float(getattr(t.settings, f)) for t in twins))
    for f in KNOT_CORRECTIONS:
        tables = [tuple(getattr(t.settings, f)) for t in twins if getattr(t.settings, f)]
        if not tables:
            continue
        knots = sorted({k for tab in tables for k, _ in tab})
        upd[f] = tuple((k, float(statistics.median(interpolate_knots(tab, k) for tab in tables))) for k in knots)
    for f in GRID_CORRECTIONS:
        grids = [tuple(getattr(t.settings, f)) for t in twins if getattr(t.settings, f)]
        if grids:
            cells = sorted({(b, k) for g in grids for b, k, _ in g})
            upd[f] = tuple((b, k, float(statistics.median(interpolate_grid(g, b, k) for g in grids))) for b, k in cells)
    note = f"stage corrections: the median over {label or f'{len(twins)} stage windows'}, correction by correction"
    return replace(first, settings=replace(first.settings, **upd), notes=(*first.notes, note))


# the stage corrections a note lists, with the unit each is read in: (field, label of one cell, scale, unit)
SUMMARY_CORRECTIONS = (("prefill_correction_by_tokens_s", "prefill {} tokens", 1e3, "ms"),
                       ("decode_correction_by_batch_s", "decode B={}", 1e3, "ms"),
                       ("decode_context_s_per_token_by_batch", "context B={}", 1e6, "µs a token"),
                       ("mixed_correction_by_batch_tokens_s", "mixed B={} {} tokens", 1e3, "ms"))


def correction_summary(combined: TwinSpec, singles: Sequence[TwinSpec]) -> str:
    """Every cell of the stage correction tables of `combined` (the twin the points are predicted with), each with what
    the single windows' twins read there in brackets, in window order (how far the windows agreed): "prefill 512
    tokens +232.5 ms (+232.5, +24.7, +330.1); ..."."""

    def read(t: Any, f: str, key: list[Any], scale: float, digits: int) -> str:
        tab = tuple(getattr(t.settings, f, ()) or ())
        if not tab:
            return "—"
        x = interpolate_grid(tab, *key) if f in GRID_CORRECTIONS else interpolate_knots(tab, key[0])
        return f"{x * scale:+.{digits}f}"

    parts = []
    for f, label, scale, unit in SUMMARY_CORRECTIONS:
        digits = 2 if scale > 1e3 else 1
        for cell in tuple(getattr(combined.settings, f, ()) or ()):
            *key, value = cell
            each = ", ".join(read(t, f, key, scale, digits) for t in singles)
            parts.append(f"{label.format(*key)} {value * scale:+.{digits}f} {unit} ({each})")
    return "; ".join(parts)
