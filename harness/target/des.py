"""The discrete-event driver: runs a scheduler over a request list in simulated time (no sockets, no sleeping).

The same scheduler objects the HTTP twin runs in real time (harness.target.engine.Engine) are
driven here by popping the Timeline's events in order, so a ten-minute workload is simulated in
the time its events take to compute. Each request's first-token and finish instants come back;
`summarise_run` turns them into the load generator's figures (same definitions as
workloads.summary: TTFT from the send, TPOT = (E2E − TTFT)/(output − 1), throughput over the
window of intended sends [warmup, span − cooldown)).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.target.saturation import completion_rate, saturated_rates, saturation_window
from harness.target.timeline import SimRequest, Timeline


@dataclass(frozen=True)
class ArrivingRequest:
    """One request of a workload as the twin sees it."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()
    slot: int | None = None  # pinned to this engine slot (llama-server's `id_slot`), as the loop's stage requests are


@dataclass(frozen=True)
class SimRun:
    """Per-request instants of one simulation (seconds from the schedule's start; NaN: no token)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finished_s: np.ndarray
    output_tokens: np.ndarray
    rejected: int
    token_times_in_window: int  # content events landing in [window_start_s, window_end_s)
    window_start_s: float
    window_end_s: float
    events: int
    compute_s: float  # wall seconds the simulation took (this machine)
    token_times_s: tuple[np.ndarray, ...] | None = None  # per request, the instant of each token event (record_tokens)
    prompt_start_s: np.ndarray | None = None  # when the engine began each prompt (NaN: the scheduler does not say)


def simulate(make_scheduler: Callable[[], Any], requests: Sequence[ArrivingRequest], *,
             window: tuple[float, float] | None = None, max_events: int = 50_000_000, record_tokens: bool = False) -> SimRun:
    """Run a fresh scheduler over `requests`; `window` counts content events for the token throughput;
    `record_tokens` keeps every token event's instant per request (what a client's chunk stamps would show)."""
    if not requests:
        raise HarnessError("the twin needs at least one request to simulate; the workload is empty.")
    t0 = time.perf_counter()
    sched = make_scheduler()
    tl = Timeline()
    w0, w1 = window if window is not None else (-math.inf, math.inf)
    count = [0]

    times: dict[int, list[float]] = {}

    def on_tokens(items: list[tuple[SimRequest, int]], at_s: float) -> None:
        if w0 <= at_s < w1:
            count[0] += sum(n for _, n in items)
        if record_tokens:
            for r, _ in items:
                times.setdefault(id(r), []).append(at_s)

    def on_done(req: SimRequest, at_s: float) -> None:
        pass

    sched.bind(tl, on_tokens, on_done)
    reqs = [SimRequest(str(i), r.input_tokens, r.output_tokens, r.block_hashes, slot=r.slot) for i, r in enumerate(requests)]
    for r, a in zip(reqs, requests):
        tl.at(a.arrival_s, sched.submit, r, a.arrival_s)
    tl.run_due(math.inf, limit=max_events)
    if tl.next_s() is not None:
        raise HarnessError(f"the simulation ran {tl.events_run} events without finishing; the workload is too large "
                           "for one simulation (shorten it) or the scheduler does not settle.")
    nan = math.nan
    return SimRun(
        arrival_s=np.array([r.arrival_s for r in reqs]),
        first_token_s=np.array([nan if r.first_token_s is None else r.first_token_s for r in reqs]),
        finished_s=np.array([nan if r.finished_s is None else r.finished_s for r in reqs]),
        output_tokens=np.array([r.emitted for r in reqs]),
        rejected=sum(1 for r in reqs if r.rejected),
        token_times_in_window=count[0], window_start_s=w0, window_end_s=w1,
        events=tl.events_run, compute_s=time.perf_counter() - t0,
        token_times_s=tuple(np.array(times.get(id(r), ())) for r in reqs) if record_tokens else None,
        prompt_start_s=np.array([nan if r.prompt_start_s is None else r.prompt_start_s for r in reqs]),
    )


@dataclass(frozen=True)
class ServedFigures:
    """What the twin predicts (or the load generator measured) for one workload at one arrival rate."""

    rate_per_s: float
    requests_measured: int
    request_throughput_per_s: float
    output_tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    tpot_p50_s: float | None
    e2e_p50_s: float | None
    rejected: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _p(a: np.ndarray, q: float) -> float | None:
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else None


def summarise_run(run: SimRun, rate_per_s: float) -> ServedFigures:
    w0, w1 = run.window_start_s, run.window_end_s
    win = max(w1 - w0, 1e-9)
    m = (run.arrival_s >= w0) & (run.arrival_s < w1)
    ttft = run.first_token_s[m] - run.arrival_s[m]
    e2e = run.finished_s[m] - run.arrival_s[m]
    out = run.output_tokens[m]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (run.finished_s[m] - run.first_token_s[m]) / (out - 1), np.nan)
    done_in = np.isfinite(run.finished_s) & (run.finished_s >= w0) & (run.finished_s < w1)
    return ServedFigures(
        rate_per_s=rate_per_s, requests_measured=int(m.sum()), request_throughput_per_s=float(done_in.sum()) / win,
        output_tokens_per_s=run.token_times_in_window / win, ttft_p50_s=_p(ttft, 50), ttft_p90_s=_p(ttft, 90),
        tpot_p50_s=_p(tpot, 50), e2e_p50_s=_p(e2e, 50), rejected=run.rejected,
    )


def saturation_capacity(make_scheduler: Callable[[], Any], shape: Iterable[tuple[int, int]], *, n_requests: int,
                        by: str = "completions") -> tuple[float, float]:
    """Throughput at saturation: `n_requests` (cycling through `shape`'s (input, output) pairs) all waiting at t = 0;
    (requests/s, output tokens/s) over the stretch between the 20th and the 80th percentile completion instant.

    by "completions" (chapter mode's pinned figures): the completions in that stretch over its length. by "tokens"
    (harness.target.saturation, what the loop measures): the output tokens emitted in it, which completion waves
    (a burst into idle slots finishing a slot-full at a time) do not bias."""
    pairs = list(shape)
    if not pairs or n_requests < 5:
        raise HarnessError("the capacity search needs at least one (input, output) pair and 5 requests.")
    reqs = [ArrivingRequest(0.0, *pairs[i % len(pairs)]) for i in range(n_requests)]
    if by == "tokens":
        return backlog_rates(make_scheduler, reqs, min_completions=5)
    if by != "completions":
        raise HarnessError(f"saturation_capacity: by must be 'completions' or 'tokens', got {by!r}.")
    run = simulate(make_scheduler, reqs)
    done = int(np.isfinite(run.finished_s).sum())
    if done < 5:
        raise HarnessError(f"only {done} of {n_requests} requests completed in the capacity simulation; check the settings.")
    rate = completion_rate(run.finished_s, min_completions=5)
    rps = math.inf if rate is None else rate  # None here: every completion in the window at one instant
    mean_out = float(np.mean([o for _, o in pairs]))
    return rps, rps * mean_out


def backlog_rates(make_scheduler: Callable[[], Any], requests: Sequence[ArrivingRequest], *, min_completions: int = 10) -> tuple[float, float]:
    """(requests/s, output tokens/s) of a backlog by harness.target.saturation's estimator; the simulation runs twice
    (it is deterministic): once for the completion instants that set the window, once counting the tokens inside it."""
    run = simulate(make_scheduler, requests)
    w = saturation_window(run.finished_s, min_completions=min_completions)
    if w is None:
        done = int(np.isfinite(run.finished_s).sum())
        raise HarnessError(f"only {done} of {len(requests)} requests completed in the capacity simulation (at least "
                           f"{min_completions} are needed); check the settings.")
    counted = simulate(make_scheduler, requests, window=w).token_times_in_window
    rates = saturated_rates(w, lambda a, b: counted, float(np.mean([r.output_tokens for r in requests])))
    assert rates is not None
    return rates
