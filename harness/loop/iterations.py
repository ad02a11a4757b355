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

import bisect
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from harness.loop.state import LoopState
from harness.loop_records.steps import StepRow
from harness.served import fmt_error_pct, relative_error
from harness.store import Run
from harness.target.des import simulate
from harness.target.twin import requests_from_rows

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


def _err(p: float | None, m: float | None) -> float | None:
    return relative_error(p, m)


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


STABILITY_MIN_ITERATIONS = 20  # a measurement's median step at a batch counts with at least this many plain iterations


@dataclass(frozen=True)
class StepStability:
    """How far the engine's plain decode step moved against the twin's between the measurements of one mix: per
    measurement, engine / twin 25th-percentile step of the plain iterations (no first token in them) at one batch (the
    fullest, else 1: step_stability). The twin simulated the same requests with one set of constants, so what
    moves between measurements is the engine's speed (the host's), not the model: the repeatability against which a
    ±10 % target can be read. (The ratio's level is the twin's error at that batch, the served-steps table.)"""

    mix: str
    batch: int
    ratios: tuple[float, ...]  # per measurement (point or repeat) that has the batch, in the order measured

    @property
    def spread_pct(self) -> float:
        """(max − min) / median of the per-measurement ratios, in %."""
        return (max(self.ratios) - min(self.ratios)) / statistics.median(self.ratios) * 100.0

    def text(self) -> str:
        return (f"host stability, {self.mix}: the engine's plain batch-{self.batch} decode step over the twin's (25th percentile "
                f"each) ranged "
                f"{min(self.ratios):.2f}–{max(self.ratios):.2f} over {len(self.ratios)} measurements of this mix, a spread of "
                f"{self.spread_pct:.0f} % of their median")


STABILITY_QUANTILE = 0.25  # of a batch's plain iterations: the pure decode steps are the fast ones; an iteration that
# also ran another request's prompt chunk (no token for it yet) is several times longer, and at batch slots − 1 they can
# be half of all, which would flip a median between the two populations from one measurement to the next


def _fast(gaps: list[float]) -> float:
    """The STABILITY_QUANTILE quantile of `gaps` (nearest rank)."""
    g = sorted(gaps)
    return g[min(len(g) - 1, int(STABILITY_QUANTILE * len(g)))]


def _plain(its: Sequence[Iteration]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for x in its:
        if x.first_tokens == 0:
            out.setdefault(x.batch, []).append(x.gap_s)
    return out


def step_stability(mix: str, pairs: Sequence[tuple[Sequence[Iteration], Sequence[Iteration]]],
                   min_n: int = STABILITY_MIN_ITERATIONS) -> StepStability | None:
    """`pairs`: (engine iterations, twin iterations) per measurement. A measurement has a ratio at a batch when both
    sides have at least `min_n` plain iterations there. The batch is the fullest one with a ratio anywhere, else batch 1,
    when it has ratios in two measurements or more; else None."""
    ratios: dict[int, list[float]] = {}
    for e, t in pairs:
        pe, pt = _plain(e), _plain(t)
        for b, g in pe.items():
            h = pt.get(b, [])
            if len(g) >= min_n and len(h) >= min_n and _fast(h) > 0:
                ratios.setdefault(b, []).append(_fast(g) / _fast(h))
    # a step at a batch between 1 and the fullest may carry another slot's prompt chunk (that slot yields no token yet),
    # in proportions that change from run to run; at the fullest batch every slot decodes, and at batch 1 (light load)
    # the request is alone
    full = max(ratios, default=None)
    for b in (full, 1):
        if b is not None and len(ratios.get(b, ())) >= 2:
            return StepStability(mix, b, tuple(ratios[b]))
    return None


def interrupted_gaps(token_times_s: Sequence[Sequence[float]], cluster_s: float | None = None) -> int:
    """How many gaps between one request's consecutive tokens had another request's first token arrive in them (the
    iteration that ended the gap, or one inside it, finished that request's prompt): the decode interruptions a served
    run's generating requests sat through. A first token within the cluster width of the gap's end belongs to the
    iteration that ended it; one within the width of its start, to the iteration before."""
    w = cluster_width_s(token_times_s) if cluster_s is None else cluster_s
    firsts = sorted(float(t[0]) for t in token_times_s if len(t))
    n = 0
    for times in token_times_s:  # a request's own first token is at or before every gap's start: never counted
        n += sum(bisect.bisect_right(firsts, float(b) + w) > bisect.bisect_right(firsts, float(a) + w)
                 for a, b in zip(times, times[1:]))
    return n


@dataclass(frozen=True)
class PromptSummary:
    """One mix's served prompts, engine against twin over the same workloads: the iterations that finished exactly one
    prompt (their length: the prompt's own time plus the decode tokens that rode along), and how often a generating
    request's next token waited for such an iteration. A served prompt slower than the twin's also moves the queue:
    more requests find a prompt in progress, and each running decode then gets one token per prompt iteration."""

    mix: str
    engine_n: int
    engine_median_s: float | None
    twin_n: int
    twin_median_s: float | None
    engine_interrupted: int  # gaps (interrupted_gaps) over every measurement of the mix
    twin_interrupted: int
    engine_requests: int
    twin_requests: int

    @property
    def median_error(self) -> float | None:
        return _err(self.twin_median_s, self.engine_median_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"median_error": self.median_error}

    def text(self) -> str:
        ms = (lambda v: "—" if v is None else f"{v * 1e3:.0f} ms")
        per = (lambda k, n: f"{k / n:.2f}" if n else "—")
        err = self.median_error
        return (f"served prompts, {self.mix}: the iterations that finished one prompt beside a decoding request took a "
                f"median {ms(self.engine_median_s)} over {self.engine_n} (twin {ms(self.twin_median_s)} over {self.twin_n}"
                + ("" if err is None else f", {fmt_error_pct(err, digits=0)}") + "); a generating request's token waited for another "
                f"request's prompt {per(self.engine_interrupted, self.engine_requests)} times a request on the engine, "
                f"{per(self.twin_interrupted, self.twin_requests)} in the twin ({self.engine_interrupted} and "
                f"{self.twin_interrupted} gaps)")


def prompt_summary(mix: str, pairs: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]],
                   iterations: Sequence[tuple[Sequence[Iteration], Sequence[Iteration]]] | None = None) -> PromptSummary | None:
    """`pairs`: (engine token instants per request, twin token instants per request) per measurement of the mix;
    `iterations`: the same measurements' reconstruct() of each side, when the caller has them already (else they are
    reconstructed here). None when neither side finished a prompt in a decoding iteration."""
    its = iterations if iterations is not None else [(reconstruct(e), reconstruct(t)) for e, t in pairs]
    e_gap = [x.gap_s for e, _ in its for x in e if x.first_tokens == 1]
    t_gap = [x.gap_s for _, t in its for x in t if x.first_tokens == 1]
    if not e_gap and not t_gap:
        return None
    count = (lambda side: sum(1 for t in side if len(t)))
    return PromptSummary(mix, len(e_gap), statistics.median(e_gap) if e_gap else None, len(t_gap),
                         statistics.median(t_gap) if t_gap else None, sum(interrupted_gaps(e) for e, _ in pairs),
                         sum(interrupted_gaps(t) for _, t in pairs), sum(count(e) for e, _ in pairs),
                         sum(count(t) for _, t in pairs))


def served_steps(state: LoopState, say: Callable[[str], None] = lambda m: None) -> list[StepRow]:
    """Per mix and batch size: the engine's iterations reconstructed from every measured run's chunk stamps against the
    twin's, reconstructed the same way from its simulation of the same requests; its notes (host stability, served
    prompts, empty-text tokens) go into state.notes. A diagnostic: a failure here is a note, never fails the run."""
    by_mix: dict[str, tuple[list[Iteration], list[Iteration]]] = {}
    twin_sims: dict[int, tuple[list[Any], list[Iteration]]] = {}  # a point's repeats share arrivals and lengths: one simulation
    per_measurement: dict[str, list[Any]] = {}  # mix -> (engine, twin) iterations of each run, in order
    stamps: dict[str, list[Any]] = {}  # mix -> (engine, twin) token instants per request of each run
    short = total = 0  # requests that streamed fewer content events than tokens (tokens whose text was empty)
    try:
        for p in state.points:
            m, twin = state.measured.get(p.point.index), state.twin_of(p.point.index)
            if m is None or twin is None:
                continue
            for r in m.runs:
                df = Run(r.run.run_dir).table("requests")
                ok = df[df["error_class"] == "ok"]
                if not len(ok):
                    continue
                total += len(ok)
                short += int((ok["output_tokens_chunks"] < ok["output_tokens_usage"].fillna(0)).sum())
                eng, tw = by_mix.setdefault(p.point.workload, ([], []))
                times = [[float(t) / 1e9 for t in c] for c in ok["chunk_ns"]]
                its = reconstruct(times)
                eng += its
                if p.point.index not in twin_sims:
                    sim = simulate(twin.make_scheduler, requests_from_rows(p.artifact.rows), record_tokens=True)
                    tt = list(sim.token_times_s or ())
                    twin_sims[p.point.index] = (tt, reconstruct(tt))
                twin_times, twin_its = twin_sims[p.point.index]
                tw += twin_its
                per_measurement.setdefault(p.point.workload, []).append((its, twin_its))
                stamps.setdefault(p.point.workload, []).append((times, twin_times))
    except Exception as exc:  # noqa: BLE001 - a diagnostic must not fail the run it describes
        state.note(f"served steps not reconstructed ({type(exc).__name__}: {exc})", say)
        return []
    for mix, ms in per_measurement.items():
        st = step_stability(mix, ms)
        if st is not None:
            state.notes.append(st.text() + " (the TTFT/TPOT target is ±10 %)")
    for mix, ms in stamps.items():
        ps = prompt_summary(mix, ms, per_measurement[mix])
        if ps is not None:
            state.notes.append(ps.text())
    if short:
        state.notes.append(f"served steps: {short} of {total} requests streamed fewer content events than their usage "
                           "tokens (tokens with empty text, e.g. a random-weight model's byte pieces): the engine's "
                           "iterations that carried such a token are counted with a smaller batch")
    return [row for mix, (e, t) in by_mix.items() for row in compare_steps(mix, e, t)]
