"""Run a deployment's twin over a workload in simulated time, as the benchmark would run against the real engine.

Closed loop (`concurrency` N, what aiperf / `vllm bench serve --max-concurrency` / genai-perf do): N clients start
together and each sends its next request the moment its previous one ends, so the queue the clients build — N
prompts arriving at once, then arrivals in the rhythm of completions — is part of every TTFT. Open loop: Poisson
arrivals at `rate_per_s`. The first `warmup` requests are run but not measured; the measured ones are the next
`requests`; the run ends when every request has finished (as aiperf waits for its last responses).

Per request: TTFT = first token − send; TPOT = (finish − first token) / (output − 1); E2E = finish − send.
Throughput: measured requests (and their output tokens) over the span from the first measured send to the last
measured finish.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from harness.errors import HarnessError
from harness.predict.deployment import Workload
from harness.target.timeline import SimRequest, Timeline

MAX_EVENTS = 20_000_000


@dataclass(frozen=True)
class RunResult:
    """Per measured request (seconds), and what the run cost."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    output_tokens: np.ndarray
    span_s: float
    rejected: int
    events: int
    compute_s: float
    cluster: Any = None  # the simulated cluster after the run (its instances' counters)


def request_lengths(w: Workload, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) token counts of `n` requests: fixed, or uniform in the workload's ranges (seeded)."""
    if w.fixed_lengths:
        return np.full(n, w.input_tokens, dtype=np.int64), np.full(n, w.output_tokens, dtype=np.int64)
    rng = np.random.default_rng(w.seed)
    lo_i, hi_i = w.length_range(w.input_tokens)
    lo_o, hi_o = w.length_range(w.output_tokens)
    return rng.integers(lo_i, hi_i + 1, n), rng.integers(lo_o, hi_o + 1, n)


def run(make_cluster: Callable[[], Any], w: Workload) -> RunResult:
    """Simulate `w` against a fresh cluster (a scheduler: bind / submit) and return the measured requests."""
    t_start = time.perf_counter()
    total = w.warmup + w.measured_requests
    ins, outs = request_lengths(w, total)
    tl = Timeline()
    cluster = make_cluster()
    reqs: list[SimRequest] = []
    rejected = [0]

    def send(now: float) -> None:
        i = len(reqs)
        if i >= total:
            return
        r = SimRequest(str(i), int(ins[i]), int(outs[i]))
        reqs.append(r)
        cluster.submit(r, now)

    def on_tokens(items: list, at_s: float) -> None:
        pass

    def on_done(r: SimRequest, at_s: float) -> None:
        if r.rejected:
            rejected[0] += 1
        if w.closed_loop:
            tl.at(at_s, send, at_s)  # the client sends its next request as soon as this one ends

    cluster.bind(tl, on_tokens, on_done)
    if w.closed_loop:
        for _ in range(min(int(w.concurrency or 0), total)):
            tl.at(0.0, send, 0.0)
    else:
        rng = np.random.default_rng(w.seed + 1)
        t = 0.0
        for _ in range(total):
            t += float(rng.exponential(1.0 / float(w.rate_per_s or 1.0)))
            tl.at(t, send, t)
    tl.run_due(math.inf, limit=MAX_EVENTS)
    if tl.next_s() is not None:
        raise HarnessError(f"the simulation ran {tl.events_run:,} events without finishing; shorten the workload "
                           "(--requests) or check the deployment.")
    m = reqs[w.warmup:]
    if not m:
        raise HarnessError("no request was measured: give --requests >= 1.")
    nan = math.nan
    send_s = np.array([r.arrival_s for r in m])
    first = np.array([nan if r.first_token_s is None else r.first_token_s for r in m])
    fin = np.array([nan if r.finished_s is None else r.finished_s for r in m])
    out = np.array([r.emitted for r in m], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (fin - first) / (out - 1), np.nan)
    done = np.isfinite(fin)
    span = float(np.nanmax(fin) - np.min(send_s)) if done.any() else 0.0
    return RunResult(first - send_s, tpot, fin - send_s, out, span, rejected[0], tl.events_run,
                     time.perf_counter() - t_start, cluster)
