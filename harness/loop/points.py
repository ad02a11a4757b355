"""The loop's served-point step: send each point's workload (and each capacity burst) to the engine with the load
generator, back to back `repeats` times, and take their median with the median's bootstrap interval over the
requests. Both the CPU and the GPU loop measure their points here."""

from __future__ import annotations

import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.errors import HarnessError
from harness.loop.measure import fit_prompts, measure_served
from harness.loop.output import LoopOutput
from harness.loop.state import EngineTarget, LoopState, MeasuredPoint, PlannedPoint, RunResult
from harness.loop_records.verdict import bootstrap_median_interval
from harness.served import ServedMeasurement
from workloads.artifact import WorkloadArtifact, save_artifact
from workloads.prompts import prompt_text

INTERVAL_METRICS = {"ttft_p50_s": "ttft_s", "tpot_p50_s": "tpot_s"}  # the judged medians and the request column of each

ProgressFn = Callable[[str], None]


def fresh_prompts(rows: Sequence[dict[str, Any]], salt: int) -> list[dict[str, Any]]:
    """The rows with new prompt words of the same target length (arrivals, lengths and everything else kept): a
    repeat must not find its prompts in the engine's prompt cache (a repeated 512-token prompt's TTFT fell from 1.6 s
    to 0.1 s on llama-server), so `salt` must differ for every (point, repeat): with the repeat alone as salt, the next
    point's repeat resent the previous point's words. The twin's prediction does not depend on the words."""
    return [{**r, "prompt": prompt_text(int(r["prompt_tokens_target"]), 1_000_003 * (salt + 1) + 7919 * i + 13)}
            for i, r in enumerate(rows)]


def fitted(eng: EngineTarget, art: WorkloadArtifact) -> tuple[WorkloadArtifact, int]:
    """`art` with its prompts made exactly their target length by the engine's tokenizer, and how many could not be."""
    rows, inexact = fit_prompts(eng.url, art.rows)
    return WorkloadArtifact(art.name, rows, art.meta), inexact


def describe(p: PlannedPoint, n_points: int) -> str:
    """The progress line before a point is measured."""
    if p.burst:
        cap = p.prediction.capacity_requests_per_s or math.nan
        return (f"capacity: {p.point.workload}, {p.artifact.count} requests sent at once (predicted {cap:.3f} req/s: about "
                f"{p.artifact.count / cap:.0f} s)")
    return (f"served point {p.point.index + 1}/{n_points}: {p.point.workload} at {p.point.rate_per_s:.3f} req/s "
            f"({p.fraction:.0%} of predicted capacity), {p.artifact.count} requests")


def measure_point(eng: EngineTarget, p: PlannedPoint, out: LoopOutput, *, duration_s: float, repeats: int, say: ProgressFn,
                  settle: Callable[[], None] | None = None, drain_limit_s: float | None = None, fit: bool = True) -> MeasuredPoint:
    """`p`'s workload (as planned: fit it to the tokenizer first, `fitted`) measured `repeats` times back to back:
    repeat 0 sends it as is; each later one the same arrivals and lengths with other words (`fresh_prompts`, fitted to
    the tokenizer with `fit`: llama-server's /tokenize); `settle()`
    runs before each. Each run is a loop_served row; an unreachable engine stops the repeats and is refused. The
    measurement is their median (harness.served.ServedMeasurement.median_of) with the judged medians' bootstrap
    interval over the requests of every repeat."""
    runs: list[RunResult] = []
    art = p.artifact
    wait_s = 3.0 * art.count / (p.prediction.capacity_requests_per_s or 1.0) + 60.0 if p.burst else 0.0
    for rep in range(repeats):
        eng.alive()
        if rep:
            say(f"  repeat {rep + 1}/{repeats} of the same {'burst' if p.burst else 'workload'} (fresh prompt words)")
            rows = fresh_prompts(art.rows, salt=1000 * p.point.index + rep)
            rows = fit_prompts(eng.url, rows)[0] if fit else rows
            art = WorkloadArtifact(p.artifact.name, rows, {**p.artifact.meta, "repeat": rep})
        wd = Path(tempfile.mkdtemp(prefix="harness-loop-point-"))
        path = save_artifact(art, wd)
        if settle is not None:
            settle()
        r = measure_served(eng.url, eng.served_name, p.point, path, 0.0 if p.burst else duration_s, out.load_root, wd, eng.pid,
                           eng.threads, request_timeout_s=max(120.0, 4 * duration_s, wait_s), repeat=rep,
                           drain_limit_s=None if p.burst else drain_limit_s)
        runs.append(r)
        eng.alive()
        out.served_run(p, r)
        if r.run.unreachable:
            where = "capacity burst" if p.burst else f"point at {p.point.rate_per_s:.3g} req/s"
            raise HarnessError(f"no request of the {p.point.workload} {where} reached the engine ({r.run.errors_by_class}); is it "
                               f"serving at {eng.url}? Load run: {r.run.run_dir}")
    intervals = {m: iv for m, col in INTERVAL_METRICS.items()
                 if not p.burst and (iv := bootstrap_median_interval([r.samples.get(col, ()) for r in runs],
                                                                     seed=p.point.index)) is not None}
    return MeasuredPoint(tuple(runs), ServedMeasurement.median_of([r.served for r in runs], source=runs[0].served.source,
                                                                  intervals=intervals))


def measure_all(state: LoopState, eng: EngineTarget, out: LoopOutput, say: ProgressFn, *,
                prepare: Callable[[PlannedPoint], PlannedPoint] = lambda p: p,
                drain_limit_s: Callable[[PlannedPoint], float | None] = lambda p: None,
                settle: Callable[[], None] | None = None, after: Callable[[PlannedPoint], None] = lambda p: None,
                fit: bool = True) -> None:
    """Every planned point in order: `prepare(p)` gives the point as it is sent (into state.points), `measure_point`
    measures it `state.plan.repeats_of` its rate times, `after(p)` runs once it is measured (a stage window)."""
    n_rate = sum(1 for p in state.points if not p.burst)
    for i, p in enumerate(list(state.points)):
        eng.alive()
        say(describe(p, n_rate))
        sent = state.points[i] = prepare(p)
        m = measure_point(eng, sent, out, duration_s=state.plan.point_duration_s,
                          repeats=state.plan.repeats_of(None if sent.burst else sent.fraction), say=say,
                          settle=settle, drain_limit_s=drain_limit_s(sent), fit=fit)
        if m.measurement.requests_ok == 0:
            state.notes.append(f"{sent.point.workload} at {sent.point.load_text()}: no request succeeded "
                               f"({[r.run.errors_by_class for r in m.runs]}); the point has no measured figures")
        state.measured[sent.point.index] = m
        after(sent)


def send_fitted(eng: EngineTarget, p: PlannedPoint, notes: list[str]) -> tuple[PlannedPoint, int]:
    """`p` with its workload fitted to the engine's tokenizer (a note when some prompts could not be made exact)."""
    art, inexact = fitted(eng, p.artifact)
    if inexact:
        what = "capacity burst" if p.burst else f"point {p.point.index}"
        notes.append(f"{p.point.workload} {what}: {inexact} prompts could not be made exactly {p.point.input_tokens:g} tokens; "
                     "the twin was given the engine's count")
    return replace(p, artifact=art), inexact


__all__ = ["describe", "fresh_prompts", "measure_all", "measure_point", "send_fitted"]
