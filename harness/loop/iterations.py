"""Engine iterations reconstructed from the streams: the step times a served run had, by batch, against the twin's.

A server that runs one forward pass per iteration and then sends every generating request its token (llama-server,
vLLM, SGLang) leaves its iterations in the client's chunk stamps: the tokens of one iteration reach the client within
a fraction of a millisecond of each other, and the gap to the next group is that iteration's length. Grouping every
request's chunk instants (instants closer than the cluster width join a group) gives, per iteration, its batch B
(tokens in the group) and whether it finished a prompt (a request's first token is in it). A gap counts only when a
request of the group also had its previous token in the group before (it was generating through the gap), so idle
time between requests never passes for a step.

The same reconstruction on the twin's simulated token instants for the same workload (harness.target.des.simulate,
record_tokens) gives the twin's steps, so the two are compared like for like: per B, the median is the plain decode
step and the mean also carries the iterations in which a prompt chunk rode along (mixed steps), which are long.
This is a diagnostic of which step term is wrong; nothing in it feeds a prediction.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Sequence

CLUSTER_S = 0.002  # tokens of one iteration arrive closer than this (at most a quarter of the median inter-token gap)


@dataclass(frozen=True)
class Iteration:
    batch: int  # tokens in the group: one per generating request, including first tokens
    gap_s: float  # since the previous group
    first_tokens: int  # requests whose first token is in the group (the iteration finished their prompt)


def cluster_width_s(token_times_s: Sequence[Sequence[float]]) -> float:
    """CLUSTER_S, or a quarter of the median gap between a request's consecutive tokens when that is smaller."""
    gaps = [b - a for times in token_times_s for a, b in zip(times, times[1:]) if b > a]
    return min(CLUSTER_S, 0.25 * statistics.median(gaps)) if gaps else CLUSTER_S


def reconstruct(token_times_s: Sequence[Sequence[float]], cluster_s: float | None = None) -> list[Iteration]:
    """The iterations of one run from each request's token instants (seconds, any common origin)."""
    w = cluster_width_s(token_times_s) if cluster_s is None else cluster_s
    ev = sorted((float(t), i, k) for i, times in enumerate(token_times_s) for k, t in enumerate(times))
    groups: list[list[tuple[float, int, int]]] = []
    for e in ev:
        if groups and e[0] - groups[-1][-1][0] < w:
            groups[-1].append(e)
        else:
            groups.append([e])
    out: list[Iteration] = []
    prev_members: set[tuple[int, int]] = set()
    prev_start: float | None = None
    for g in groups:
        start = g[0][0]
        members = {(i, k) for _, i, k in g}
        if prev_start is not None and any((i, k - 1) in prev_members for _, i, k in g if k > 0):
            out.append(Iteration(len(g), start - prev_start, sum(1 for _, _, k in g if k == 0)))
        prev_members, prev_start = members, start
    return out


@dataclass(frozen=True)
class StepRow:
    """One batch size of one mix: the engine's reconstructed steps against the twin's, over the same workloads."""

    mix: str
    batch: int
    engine_n: int
    engine_median_s: float | None
    engine_mean_s: float | None
    twin_n: int
    twin_median_s: float | None
    twin_mean_s: float | None
    median_error_pct: float | None  # (twin − engine) / engine
    mean_error_pct: float | None
    engine_share: float  # of the engine's reconstructed time, the share spent in iterations of this batch
    twin_share: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _err(p: float | None, m: float | None) -> float | None:
    return None if p is None or not m else (p - m) / m * 100.0


def compare_steps(mix: str, engine: Sequence[Iteration], twin: Sequence[Iteration]) -> list[StepRow]:
    """Per batch size seen on either side: counts, median and mean iteration length, errors and time shares."""
    tot_e = sum(x.gap_s for x in engine) or 1.0
    tot_t = sum(x.gap_s for x in twin) or 1.0
    rows = []
    for b in sorted({x.batch for x in engine} | {x.batch for x in twin}):
        e = [x.gap_s for x in engine if x.batch == b]
        t = [x.gap_s for x in twin if x.batch == b]
        em, tm = (statistics.median(e) if e else None), (statistics.median(t) if t else None)
        ea, ta = (statistics.fmean(e) if e else None), (statistics.fmean(t) if t else None)
        rows.append(StepRow(mix, b, len(e), em, ea, len(t), tm, ta, _err(tm, em), _err(ta, ea), sum(e) / tot_e, sum(t) / tot_t))
    return rows
