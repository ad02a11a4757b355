"""Summary of a load run from its per-request records: windowed throughput, latency percentiles, goodput, validity.

The measurement window is [start, span_s − cooldown_s) of the schedule. Its start is warmup_s, or with
warmup_auto where the run's state settled (workloads.steady: MSER-5 on the requests in flight, or a closed
loop's completions per second), at warmup_s at the earliest. Requests whose intended send falls in the window
are measured: the latency percentiles cover those that succeeded. Every rate counts what ended inside the
window: throughput the successful completions (and content events) in it ÷ its length, goodput those
completions that met every SLO given (TTFT and E2E from the intended send, TPOT), goodput_fraction the share of
every request that ended in it (completed or failed) that did — one set, so goodput ≤ throughput. The window is
`steady` when the requests in flight hold level in it (Little's law: their drift is what the throughput carries
above the arrivals), it opens where they settled, and its halves hold as many completions within counting
spread; otherwise `notes` say why. The run is invalid when the client fell behind its own schedule (p99 send lag
above max_lag_p99_s, or fewer sends in the window than intended by more than max_send_shortfall), when more than
max_error_fraction of the sent requests failed (not_sent and run_ended are not failures), when nothing was sent,
when the window is empty, or when a target process the harness launched got less than the loop's CONTENDED_SHARE
of its cores.

Two throughput headlines, labelled, side by side: `request_throughput_per_s` (the window, with its 95 %
batch-means interval) and `request_throughput_incl_drain_per_s` (vLLM `bench serve`'s definition: every
successful completion ÷ the run's duration from t0 to the last completion, so the startup backlog and the drain
are inside it). When no completion lands in the window, `window_note` says the cause the run shows instead of a
bare 0.

`summarise_run` summarises a stored run from its stored requests table (what the load process does at the
end of a run, so a killed or imported run summarises the same way); `read_summary` reads the versioned
summary.json sidecar as a typed `StoredSummary` (its `load` a LoadSummary whose latency and lag distributions are
harness.served.Percentiles), or derives it from the table when the run has none. The stored shape is unchanged:
each Percentiles is written as its {count, mean, p50, p90, p99, max} dict, so old runs read as they are.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Mapping

import numpy as np

from harness.errors import HarnessError
from harness.served import Percentiles
from harness.loop_records.stages import CONTENDED_SHARE
from harness.telemetry.proc import busy_union_s, engine_cpu_share
from harness.versioning import load_versioned, stamp_version
from workloads.config import SummaryOptions
from workloads.steady import METHOD as STEADY_METHOD
from workloads.steady import completion_series, in_flight_series, in_flight_trend, rate_interval, steady_start

STEADY_TREND_FRACTION = 0.05  # a window is steady while the requests in flight drift by at most this share of its rate
MIN_WINDOW_COMPLETIONS = 50  # a measured start is kept only if this many completions follow it (10 batches of 5)

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class EngineCrosscheck:
    """Client TTFT against the engine's own prompt time, and streamed tokens against the engine's count, per request."""

    requests: int  # successful requests with engine timings
    ttft_minus_engine_prompt_s: Percentiles
    engine_prompt_s: Percentiles
    output_tokens_diff_nonzero: int
    output_tokens_diff_max_abs: int | None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "engine_crosscheck") -> "EngineCrosscheck":
        try:
            return cls(int(d["requests"]), Percentiles.from_dict(d.get("ttft_minus_engine_prompt_s"), source=f"{source}.ttft_minus_engine_prompt_s"),
                       Percentiles.from_dict(d.get("engine_prompt_s"), source=f"{source}.engine_prompt_s"),
                       int(d.get("output_tokens_diff_nonzero") or 0),
                       None if d.get("output_tokens_diff_max_abs") is None else int(d["output_tokens_diff_max_abs"]))
        except KeyError as exc:
            raise HarnessError(f"{source}: field {exc.args[0]!r} is missing; delete summary.json to summarise the run from its "
                               "requests table.") from None


@dataclass(frozen=True)
class EngineCpu:
    """CPU seconds a target process the harness launched on this host used over the run (None: unreadable)."""

    pid: int
    threads: int
    cpu_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> "EngineCpu | None":
        if not isinstance(d, Mapping):
            return None
        cpu = d.get("cpu_s")
        return cls(int(d.get("pid", 0)), int(d.get("threads", 1)), None if cpu is None else float(cpu))


@dataclass(frozen=True)
class LoadSummary:
    window_start_s: float
    window_end_s: float
    requests_total: int
    requests_measured: int
    requests_ok: int
    errors_by_class: dict[str, int]
    request_throughput_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_usage: float
    ttft_s: Percentiles
    ttft_from_intended_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    e2e_from_intended_s: Percentiles
    goodput_per_s: float | None
    goodput_fraction: float | None
    slo: dict[str, float | None]
    schedule_lag_s: Percentiles
    intended_rate_per_s: float
    achieved_send_rate_per_s: float
    token_count_mismatches: int
    usage_missing: int
    # vLLM bench serve's headline: successful completions / (t0 .. last completion), drain included
    run_duration_s: float = 0.0
    request_throughput_incl_drain_per_s: float = 0.0
    output_tokens_incl_drain_per_s: float = 0.0
    window_note: str | None = None  # why the windowed figures are empty, when they are
    load_mode: str = "open-loop"  # or "closed-loop" (N users each sending when its previous request ended)
    error_fraction: float = 0.0  # failed / sent (not_sent excluded)
    # the client's prompt token count (tokenizer or words) against the server's usage count, on successful requests
    prompt_tokens_client_vs_usage: dict[str, Any] | None = None
    valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    # per-request cross-check against the engine's own timings (None when the engine streams none)
    engine_crosscheck: EngineCrosscheck | None = None
    # how the window start was chosen, and whether it is steady (workloads.steady); None in runs summarised before
    window_basis: str = ""
    steady: bool | None = None
    steady_start_s: float | None = None  # where the requests in flight settled (MSER-5), whatever the window
    in_flight_trend_per_s: float | None = None  # their slope over the window: −slope is what the throughput carries
    in_flight_mean: float | None = None  # requests in flight over the window (a closed loop: the concurrency held)
    request_throughput_interval_per_s: tuple[float, float] | None = None  # 95 % batch-means interval
    requests_ended_in_window: int | None = None  # the goodput fraction's denominator (completed or failed in the window)
    requests_sent: int | None = None  # every request that was sent (not_sent excluded)
    pool_ran_out_s: float | None = None  # a closed loop whose pool was used up before the run's end: when
    notes: list[str] = field(default_factory=list)  # what a reader needs beside the headline (not steady, pool ran out)
    # a launched engine's share of its cores while it had work (CPU s / (busy s × threads)); below
    # CONTENDED_SHARE the run is contended and INVALID
    engine_cpu_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored shape (summary.json's `load`): each Percentiles as its {count, mean, p50, p90, p99, max} dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = SUMMARY_FILE) -> "LoadSummary":
        """The record from its stored dict (summary.json's `load`, any version once upgraded): percentile dicts become
        Percentiles; fields a run written before they existed lacks take their defaults."""
        if isinstance(d, LoadSummary):
            return d
        if not isinstance(d, Mapping):
            raise HarnessError(f"{source}: the load summary must be a JSON object, got {type(d).__name__}; delete the file to "
                               "summarise the run from its requests table.")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise HarnessError(f"{source}: load summary field {f.name!r} is missing; delete the file to summarise the run "
                                       "from its requests table.")
                continue
            v = d[f.name]
            if f.name in _PERCENTILE_FIELDS:
                v = Percentiles.from_dict(v, source=f"{source} load.{f.name}")
            elif f.name == "engine_crosscheck" and v is not None:
                v = EngineCrosscheck.from_dict(v, source=f"{source} load.engine_crosscheck")
            elif f.name == "request_throughput_interval_per_s" and v is not None:
                v = (float(v[0]), float(v[1]))
            kw[f.name] = v
        return cls(**kw)


_PERCENTILE_FIELDS = frozenset(("ttft_s", "ttft_from_intended_s", "tpot_s", "itl_s", "e2e_s", "e2e_from_intended_s", "schedule_lag_s"))


def measured_requests(df: Any, *, span_s: float, options: SummaryOptions = SummaryOptions(),
                      window: tuple[float, float] | None = None) -> tuple[Any, Any]:
    """(measured, ok): the requests whose intended send falls in the window, and those of them that succeeded, which
    the latency percentiles cover. `window`: the summary's own [start, end) (LoadSummary.window_start_s / _end_s, which
    a measured warm-up moves); else [warm-up, span − cool-down)."""
    if not len(df):
        return df, df
    w0, w1 = window if window is not None else (options.warmup_s, max(options.warmup_s, span_s - options.cooldown_s))
    intended = df["intended_ns"].to_numpy(dtype=float) / 1e9
    offered = (df["error_class"] != "not_sent").to_numpy() if options.closed_loop else True  # a pool's unused rest was not
    measured = df[(intended >= w0) & (intended < w1) & offered]
    return measured, measured[measured["error_class"] == "ok"]


@dataclass(frozen=True)
class _Window:
    """The measurement window and how it was chosen (summarise's first step)."""

    start_s: float
    end_s: float  # the end of the schedule less the cool-down, or when a closed loop's pool ran out
    basis: str
    steady_start_s: float | None  # where the requests in flight settled (None: they never did)
    in_flight: Any  # workloads.steady.Series of the requests in flight over the schedule, or None
    state: Any = None  # the series whose settling starts the window: in flight (open loop), completions/s (closed)
    state_name: str = "requests in flight"
    pool_ran_out_s: float | None = None
    too_few: bool = False  # too few completions to measure where the run settled: steadiness not claimed


def _ended_s(df: Any) -> np.ndarray:
    """When each request ended: its last byte, else the instant its failure was seen (send + e2e); inf: never."""
    last = df["last_byte_ns"].to_numpy(dtype=float) / 1e9
    sent = df["sent_ns"].to_numpy(dtype=float) / 1e9
    e2e = df["e2e_s"].to_numpy(dtype=float)
    out = np.where(np.isfinite(last), last, sent + e2e)
    return np.where(np.isfinite(out), out, np.inf)


def _choose_window(df: Any, span_s: float, o: SummaryOptions) -> _Window:
    w0 = o.warmup_s
    w1 = max(w0, span_s - o.cooldown_s)
    if not len(df):
        return _Window(w0, w1, f"--warmup-s {w0:g}", None, None)
    pool_out = None
    if o.closed_loop:  # the users held their concurrency only while the pool lasted
        sent = df["sent_ns"].to_numpy(dtype=float) / 1e9
        if not (df["error_class"] == "not_sent").any() and np.isfinite(sent).any() and np.nanmax(sent) < w1:
            pool_out = float(np.nanmax(sent))
            w1 = max(w0, pool_out)
    start = df["intended_ns"].to_numpy(dtype=float) / 1e9
    # a request never sent never reached the target: not in flight (a closed loop's unused pool; an open loop stopped
    # early, whose unsent rest counted in flight forever and read as a target serving less than was offered)
    start = np.where((df["error_class"] == "not_sent").to_numpy(), np.nan, start)
    series = in_flight_series(start, _ended_s(df), w1)
    state = series
    if o.closed_loop:
        ok = (df["error_class"] == "ok").to_numpy()
        state = completion_series(df["last_byte_ns"].to_numpy(dtype=float)[ok] / 1e9, w1)
    st = steady_start(state) if state is not None else None
    what = "completions per second" if o.closed_loop else "requests in flight"
    steady_at = None if st is None else st.start_s
    ok_done = df["last_byte_ns"].to_numpy(dtype=float)[(df["error_class"] == "ok").to_numpy()] / 1e9
    kept = int(((ok_done >= (steady_at or 0.0)) & (ok_done < w1)).sum())
    # a start at 0 s is a measured start too: with too few completions after it, nothing tells it from a step later on
    too_few = steady_at is not None and kept < MIN_WINDOW_COMPLETIONS
    if too_few:  # too few completions after it to tell a start-up from the run's own spread: nothing cut, nothing claimed
        steady_at = None
    if o.warmup_auto:
        if too_few:
            basis = (f"the whole schedule from {w0:g} s: {kept} completions follow where the {what} seem to settle, too few "
                     f"(< {MIN_WINDOW_COMPLETIONS}) to measure a start")
        elif steady_at is None:
            basis = (f"measured: the {what} never settled before {w1:g} s ({STEADY_METHOD} {what}), so the window is "
                     f"the whole schedule from {w0:g} s")
        else:
            w0 = max(w0, steady_at)
            basis = f"measured: the {what} settled at {steady_at:.1f} s ({STEADY_METHOD} {what})"
    else:
        basis = o.warmup_source or f"--warmup-s {w0:g}"
    return _Window(w0, max(w0, w1), basis, steady_at, series, state=state, state_name=what, pool_ran_out_s=pool_out,
                   too_few=too_few)


def summarise(df: Any, *, span_s: float, options: SummaryOptions = SummaryOptions(),
              engine_cpu: EngineCpu | None = None) -> LoadSummary:
    """`df`: the run's requests table (pandas); `span_s`: the schedule's length in seconds; `engine_cpu`: the CPU a
    target process the harness launched used over the run (harness.telemetry.proc)."""
    o = options
    win_ = _choose_window(df, span_s, o)
    w0, w1 = win_.start_s, win_.end_s
    empty_window = w1 <= w0
    win = max(w1 - w0, 1e-9)
    n_total = int(len(df))
    measured, ok = measured_requests(df, span_s=span_s, options=o, window=(w0, w1))
    errors = {str(k): int(v) for k, v in df["error_class"].value_counts().items()} if n_total else {}

    # "in the window", for every rate: requests that ended (completed, or failed) inside [w0, w1)
    last = df["last_byte_ns"].to_numpy(dtype=float) / 1e9 if n_total else np.zeros(0)
    is_ok = (df["error_class"] == "ok").to_numpy() if n_total else np.zeros(0, bool)
    ended = _ended_s(df) if n_total else np.zeros(0)
    not_sent = (df["error_class"] == "not_sent").to_numpy() if n_total else np.zeros(0, bool)
    cut = (df["error_class"] == "run_ended").to_numpy() if n_total else np.zeros(0, bool)  # in flight at the planned end
    ended_in = ~not_sent & ~cut & (ended >= w0) & (ended < w1)
    done_in = is_ok & ended_in
    chunk_times = np.concatenate([np.asarray(c, dtype=float) for c in df["chunk_ns"]]) / 1e9 if n_total else np.zeros(0)
    tokens_in = int(((chunk_times >= w0) & (chunk_times < w1)).sum())
    usage_tokens = df.loc[done_in, "output_tokens_usage"].fillna(df.loc[done_in, "output_tokens_chunks"]).sum() if n_total else 0
    throughput = float(done_in.sum()) / win

    itls: list[float] = []
    for c in ok["chunk_ns"] if len(ok) else []:
        a = np.asarray(c, dtype=float)
        if a.size >= 2:
            itls.extend((np.diff(a) / 1e9).tolist())

    slo = {"ttft_s": o.slo_ttft_s, "tpot_s": o.slo_tpot_s, "e2e_s": o.slo_e2e_s}
    goodput = frac = None
    if any(v is not None for v in slo.values()):
        good = done_in & _meets_slo(df, o) if n_total else np.zeros(0, bool)
        # one set for both: goodput counts the completions in the window that met every SLO, so goodput <= throughput;
        # the fraction is over every request that ended in the window (a failure there met no SLO)
        goodput = float(good.sum()) / win
        frac = float(good.sum()) / int(ended_in.sum()) if ended_in.any() else None

    sent = df[~not_sent] if n_total else df
    lag = Percentiles.from_values(sent["schedule_lag_s"].tolist() if len(sent) else [])
    sent_s = sent["sent_ns"].to_numpy(dtype=float) / 1e9 if len(sent) else np.zeros(0)
    n_intended = int(len(measured))  # intended send in the window
    n_sent = int(((sent_s >= w0) & (sent_s < w1)).sum())
    n_tried = int((~not_sent).sum()) if n_total else 0
    n_failed = int((~is_ok & ~not_sent & ~cut).sum()) if n_total else 0
    err_frac = n_failed / n_tried if n_tried else 0.0
    reasons = _invalid_reasons(o, span_s, w0, w1, empty_window, errors, n_total, n_tried, n_failed, err_frac, lag,
                               n_intended, n_sent, win, win_.pool_ran_out_s)
    cpu_share = _engine_cpu_share(df, engine_cpu) if n_total else None
    if cpu_share is not None and cpu_share < CONTENDED_SHARE:
        reasons.append(f"CONTENDED: the engine process (pid {engine_cpu.pid}) got {cpu_share:.0%} of its {engine_cpu.threads} "
                       f"threads' cores while it had work (below {CONTENDED_SHARE:.0%}): other processes took the CPU, so "
                       "its latencies measure the host's load; rerun on an idle host")
    duration = float(last[is_ok].max()) if n_total and is_ok.any() else 0.0  # vLLM bench serve: t0 .. last completion
    ok_all = df[is_ok] if n_total else df
    out_all = float(ok_all["output_tokens_usage"].fillna(ok_all["output_tokens_chunks"]).sum()) if len(ok_all) else 0.0
    note = None
    if not empty_window and not done_in.any():
        note = _empty_window_note(df, is_ok, last, w0, w1)
        if is_ok.any():  # (nothing succeeded: the failure reasons above say so)
            reasons.append("no request completed inside the measurement window, so the run measured no steady figure "
                           "(the window note says why)")
    ci = rate_interval(last[done_in], w0, w1) if n_total else None
    trend = in_flight_trend(win_.in_flight, w0, w1) if win_.in_flight is not None else None
    late = win_.steady_start_s
    thr_settled = (float((done_in & (last >= late)).sum()) / max(w1 - late, 1e-9)
                   if late is not None and w0 < late < w1 else None)  # the window's throughput from where it settled
    mid = (w0 + w1) / 2
    halves = (int((done_in & (last < mid)).sum()), int((done_in & (last >= mid)).sum()))
    e2e_p50 = float(np.median(ok["e2e_s"].astype(float))) if len(ok) else None
    steady, notes = _steadiness(win_, throughput, n_intended / win, trend, thr_settled, bool(done_in.any()), halves,
                                e2e_p50)
    if cut.any():
        notes.append(f"{int(cut.sum())} requests were in flight when the run's time ended (run_ended): they are left out of "
                     "every figure and are not failures")
    in_flight_mean = None
    if win_.in_flight is not None:
        _, m = win_.in_flight.between(w0, w1)
        in_flight_mean = float(m.mean()) if m.size else None
    pt = None
    if len(ok) and "prompt_tokens_usage" in ok.columns and "prompt_tokens_target" in ok.columns:
        both = ok[["prompt_tokens_target", "prompt_tokens_usage"]].dropna()
        if len(both):
            d = (both["prompt_tokens_usage"].astype(float) - both["prompt_tokens_target"].astype(float))
            pt = {"requests": int(len(both)), "differing": int((d != 0).sum()), "usage_minus_client_mean": float(d.mean()),
                  "usage_minus_client_max_abs": float(d.abs().max())}
    return LoadSummary(
        run_duration_s=duration, request_throughput_incl_drain_per_s=float(is_ok.sum()) / duration if duration > 0 else 0.0,
        output_tokens_incl_drain_per_s=out_all / duration if duration > 0 else 0.0, window_note=note,
        load_mode="closed-loop" if o.closed_loop else "open-loop", error_fraction=err_frac, prompt_tokens_client_vs_usage=pt,
        window_start_s=w0, window_end_s=w1, requests_total=n_total, requests_measured=int(len(measured)), requests_ok=int(len(ok)),
        errors_by_class=errors, request_throughput_per_s=throughput, output_tokens_per_s=tokens_in / win,
        output_tokens_per_s_usage=float(usage_tokens) / win,
        ttft_s=Percentiles.from_values(ok["ttft_s"].tolist() if len(ok) else []),
        ttft_from_intended_s=Percentiles.from_values(ok["ttft_from_intended_s"].tolist() if len(ok) else []),
        tpot_s=Percentiles.from_values(ok["tpot_s"].tolist() if len(ok) else []), itl_s=Percentiles.from_values(itls),
        e2e_s=Percentiles.from_values(ok["e2e_s"].tolist() if len(ok) else []),
        e2e_from_intended_s=Percentiles.from_values(ok["e2e_from_intended_s"].tolist() if len(ok) else []),
        goodput_per_s=goodput, goodput_fraction=frac, slo=slo, schedule_lag_s=lag,
        intended_rate_per_s=n_intended / win, achieved_send_rate_per_s=n_sent / win,
        token_count_mismatches=int(df["token_count_mismatch"].sum()) if n_total else 0,
        usage_missing=int(df.loc[df["error_class"] == "ok", "usage_missing"].sum()) if n_total else 0,
        valid=not reasons, invalid_reasons=reasons,
        engine_crosscheck=_engine_crosscheck(ok),
        window_basis=win_.basis, steady=steady, steady_start_s=win_.steady_start_s, in_flight_trend_per_s=trend,
        in_flight_mean=in_flight_mean,
        request_throughput_interval_per_s=None if ci is None else (ci.low_per_s, ci.high_per_s),
        requests_ended_in_window=int(ended_in.sum()), requests_sent=n_tried, pool_ran_out_s=win_.pool_ran_out_s, notes=notes,
        engine_cpu_share=cpu_share,
    )


def _engine_cpu_share(df: Any, cpu: EngineCpu | None) -> float | None:
    """The engine's CPU over the time it had work: the union of its requests' [send, last byte] (the loop's measure)."""
    if cpu is None or cpu.cpu_s is None:
        return None
    sent = df["sent_ns"].to_numpy(dtype=float) / 1e9
    ended = _ended_s(df)
    busy = busy_union_s([(a, b) for a, b in zip(sent, ended) if np.isfinite(a) and np.isfinite(b) and b > a])
    return engine_cpu_share(cpu.cpu_s, busy, cpu.threads)


def _meets_slo(rows: Any, o: SummaryOptions) -> np.ndarray:
    """Per request: met every SLO given (TTFT and E2E from the intended send, TPOT)."""
    good = np.ones(len(rows), dtype=bool)
    if o.slo_ttft_s is not None:
        good &= rows["ttft_from_intended_s"].astype(float).fillna(np.inf).to_numpy(dtype=float) <= o.slo_ttft_s
    if o.slo_tpot_s is not None:
        good &= rows["tpot_s"].astype(float).fillna(0.0).to_numpy(dtype=float) <= o.slo_tpot_s
    if o.slo_e2e_s is not None:
        good &= rows["e2e_from_intended_s"].astype(float).fillna(np.inf).to_numpy(dtype=float) <= o.slo_e2e_s
    return good


def _invalid_reasons(o: SummaryOptions, span_s: float, w0: float, w1: float, empty_window: bool, errors: dict[str, int],
                     n_total: int, n_tried: int, n_failed: int, err_frac: float, lag: Percentiles, n_intended: int,
                     n_sent: int, win: float, pool_ran_out_s: float | None) -> list[str]:
    reasons = []
    if empty_window and pool_ran_out_s is not None:
        reasons.append(f"the measurement window is empty: the closed loop's pool ran out at {pool_ran_out_s:.1f} s, before "
                       f"the window's start at {w0:g} s; give a larger --num-requests")
    elif empty_window:
        reasons.append(f"the measurement window [{w0:g}, {span_s - o.cooldown_s:g}) s is empty: warm-up {o.warmup_s:g} s and "
                       f"cool-down {o.cooldown_s:g} s leave nothing of the {span_s:g} s schedule")
    if n_tried and err_frac > o.max_error_fraction:
        top = ", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]) if k not in ("ok", "not_sent", "run_ended"))
        reasons.append(f"{n_failed} of {n_tried} sent requests failed ({err_frac:.0%}, above the {o.max_error_fraction:.0%} allowed): {top}")
    if n_tried == 0:
        reasons.append("no request was sent" if n_total else "the run recorded no request")
    if o.closed_loop:
        pass  # closed loop: no schedule to keep; the pool's unused rest is 'not_sent' by design
    elif lag.p99 is not None and lag.p99 > o.max_lag_p99_s:
        reasons.append(f"p99 schedule lag {lag.p99 * 1e3:.1f} ms exceeds {o.max_lag_p99_s * 1e3:.1f} ms: the client could not "
                       "keep its schedule (more workers, a lower rate or a higher --max-concurrency)")
    if not o.closed_loop and n_intended and n_sent < (1 - o.max_send_shortfall) * n_intended:
        reasons.append(f"sent {n_sent} of {n_intended} intended requests in the window (achieved {n_sent / win:.3g}/s vs "
                       f"{n_intended / win:.3g}/s intended)")
    if (not o.closed_loop and "not_sent" in errors) or "lost" in errors:
        reasons.append(f"{errors.get('not_sent', 0)} requests never sent and {errors.get('lost', 0)} lost before the run ended")
    return reasons


def _empty_window_note(df: Any, is_ok: np.ndarray, last: np.ndarray, w0: float, w1: float) -> str:
    """Why no request completed inside the window, from what the run shows: nothing succeeded; a window shorter than
    generating one response takes; every completion before it; or requests that waited for their first token (a
    backlog) so the first completion came after it."""
    if not is_ok.any():
        return "no request succeeded, so no throughput was measured"
    ok = df[is_ok]
    done = last[is_ok]
    first_done, last_done = float(done.min()), float(done.max())
    ttft = ok["ttft_s"].astype(float)
    gen_min = float((ok["e2e_s"].astype(float) - ttft.fillna(0.0)).min())
    e2e_min = float(ok["e2e_s"].astype(float).min())
    head = f"no request completed inside the window [{w0:g}, {w1:g}) s"
    if w1 - w0 < gen_min:
        return (f"{head}: the window is {w1 - w0:.3g} s long and generating one response took at least {gen_min:.3g} s (the "
                f"fastest request {e2e_min:.3g} s, {float(ttft.min()):.3g} s of it to the first token), so none could start "
                f"and end inside it; measure a run several requests long (--duration-s well above {e2e_min:.3g} s)")
    if last_done < w0:
        return (f"{head}: every completion came before it (the last at {last_done:.2f} s); the window starts too late for "
                "this run (a smaller --warmup-s, or a longer run)")
    if first_done >= w1:
        return (f"{head}: the first completion came at {first_done:.1f} s because requests waited {float(ttft.min()):.3g}–"
                f"{float(ttft.max()):.3g} s for their first token (generating took {gen_min:.3g} s and more), so the target "
                "was still working off its startup backlog; measure a longer run or move the window after it (--warmup-s "
                "auto), and read the drain-inclusive figure meanwhile")
    return f"{head}: completions came before ({first_done:.2f} s) and after it, none inside; a longer window would hold some"


FILL_LIFETIMES = 3.0  # a window shorter than this many request lifetimes (E2E p50) may still hold the fill-up


def _steadiness(w: _Window, throughput: float, offered: float, trend: float | None, thr_settled: float | None,
                completed: bool, halves: tuple[int, int], e2e_p50_s: float | None = None) -> tuple[bool | None, list[str]]:
    """Whether the window is steady — the requests in flight hold level in it (drift within STEADY_TREND_FRACTION of its
    rate), and it opens where they had settled or so near it that its throughput moves by less than that share — and
    the notes a reader needs beside the headline."""
    notes: list[str] = []
    if w.pool_ran_out_s is not None:
        notes.append(f"the closed loop's pool ran out at {w.pool_ran_out_s:.1f} s, before the run's end: the window ends "
                     "there (the users held their concurrency only while it lasted); give a larger --num-requests")
    if w.in_flight is None or not completed:
        return None, notes
    if w.too_few:
        notes.append(f"too few completions to tell where the run settled (fewer than {MIN_WINDOW_COMPLETIONS} after it): the "
                     "window is not claimed steady; measure a longer run")
        return None, notes
    scale = max(throughput, offered, 1e-9)
    settled = w.steady_start_s is not None and (
        w.steady_start_s <= w.start_s + 1e-9 or thr_settled is None
        or abs(throughput - thr_settled) <= STEADY_TREND_FRACTION * scale)
    level = trend is None or abs(trend) <= STEADY_TREND_FRACTION * scale
    n1, n2 = halves
    even = abs(n1 - n2) <= max(STEADY_TREND_FRACTION * (n1 + n2), 2.0 * math.sqrt(n1 + n2))  # Poisson spread of the difference
    if level and not even:
        notes.append(f"not steady: {n1} completions in the window's first half against {n2} in its second (more than their "
                     "counting spread): the rate changed inside it; measure a longer run or move the window")
    if not level:
        win = w.end_s - w.start_s
        if trend < 0:
            way = ("fell: the target was still working off a backlog, so the window's throughput is above what was "
                   "offered; measure a longer run")
        elif e2e_p50_s is not None and win < FILL_LIFETIMES * e2e_p50_s:
            # N = λ·E2E is reached only about one lifetime after the load starts: growth here is what filling looks like
            way = (f"grew, but a request took {e2e_p50_s:.3g} s end to end (p50) against the window's {win:.3g} s, so they "
                   "may still have been filling up to their level (the offered rate × E2E); a run several E2E long tells "
                   "that apart from a target serving less than was offered")
        else:
            way = "grew: the target served less than was offered (at or above its capacity)"
        notes.append(f"not steady: the requests in flight changed by {trend:+.3g}/s over the window ({trend / scale:+.0%} of "
                     f"the rate; steady means within ±{STEADY_TREND_FRACTION:.0%}); they {way}")
    elif not settled and w.steady_start_s is not None:
        notes.append(f"the window opens at {w.start_s:g} s, before the {w.state_name} settled at {w.steady_start_s:.1f} s "
                     f"(measured): its throughput is {throughput:.3g} req/s against {thr_settled:.3g} from there on, so it "
                     "includes the end of the start-up; --warmup-s auto starts the window where they settled")
    elif not settled:
        notes.append(f"the {w.state_name} never settled before {w.end_s:g} s ({STEADY_METHOD} {w.state_name}); the run may be "
                     "too short")
    return bool(level and settled and even), notes


def _engine_crosscheck(ok: Any) -> EngineCrosscheck | None:
    """Client TTFT against the engine's prompt time, and streamed tokens against its predicted_n."""
    if not len(ok) or "engine_prompt_ms" not in ok.columns or ok["engine_prompt_ms"].isna().all():
        return None
    diff = ok["engine_output_tokens_diff"].dropna()
    return EngineCrosscheck(
        requests=int(ok["engine_prompt_ms"].notna().sum()),
        ttft_minus_engine_prompt_s=Percentiles.from_values(ok["ttft_minus_engine_prompt_s"].dropna().tolist()),
        engine_prompt_s=Percentiles.from_values((ok["engine_prompt_ms"].dropna() / 1e3).tolist()),
        output_tokens_diff_nonzero=int((diff != 0).sum()),
        output_tokens_diff_max_abs=int(diff.abs().max()) if len(diff) else None,
    )


# summary.json, the run's summary sidecar. Format history (one upgrade step per version, applied on load):
#   1: {"schema_version", "load": LoadSummary, "span_s", "options": SummaryOptions, "derived_from", ...};
#      files written before the field existed carry no version and read as version 1.
# Read and written with harness.versioning (load_versioned / stamp_version), the one mechanism of issue 14.3.
SUMMARY_SCHEMA_VERSION = 1
SUMMARY_UPGRADES: dict[int, Any] = {}


def summary_options_of(run: Any) -> SummaryOptions:
    """The options the run was summarised with: its manifest's `summary_options`, else summary.json's, else defaults."""
    raw = run.manifest.extra.get("summary_options")
    if raw is None:
        side = _read_summary_file(run)
        raw = side.get("options") if side else None
    return _options_from(raw)


def _options_from(raw: Any) -> SummaryOptions:
    """SummaryOptions from a stored dict (fields this harness does not know are dropped); defaults when there is none."""
    if not isinstance(raw, Mapping):
        return SummaryOptions()
    known = {f.name for f in fields(SummaryOptions)}
    return SummaryOptions(**{k: v for k, v in raw.items() if k in known})


def span_of(run: Any) -> float:
    """The schedule's length in seconds: summary.json's `span_s`, else the workload's schedule in the manifest,
    else the last intended send of the stored requests."""
    side = _read_summary_file(run)
    if side and side.get("span_s"):
        return float(side["span_s"])
    sched = (run.manifest.extra.get("workload") or {}).get("schedule") or {}
    if sched.get("span_s"):
        return float(sched["span_s"])
    if "requests" not in run.tables():
        return 0.0
    df = run.table("requests")
    return float(df["intended_ns"].max()) / 1e9 if len(df) else 0.0


def summarise_run(run: Any, *, options: SummaryOptions | None = None, span_s: float | None = None) -> LoadSummary:
    """The summary of a stored run, from its stored requests table: the same figures whether the run finished,
    was killed (no summary.json) or was imported. Options and span default to what the run recorded."""
    # lazy: pandas adds ~0.5 s to the start-up of bench-pd, engine, loop and sweep; only a stored table uses it
    import pandas as pd

    df = run.table("requests") if "requests" in run.tables() else pd.DataFrame()  # nothing recorded: an empty summary
    return summarise(df, span_s=span_of(run) if span_s is None else span_s,
                     options=summary_options_of(run) if options is None else options,
                     engine_cpu=EngineCpu.from_dict(run.manifest.extra.get("engine_cpu")))


def summary_document(summary: LoadSummary, *, span_s: float, options: SummaryOptions, **extra: Any) -> dict[str, Any]:
    """What summary.json holds (versioned; `extra` e.g. client_process)."""
    return stamp_version({"load": summary.to_dict(), "span_s": span_s, "options": asdict(options),
                          "derived_from": "requests table", **extra}, SUMMARY_SCHEMA_VERSION)


@dataclass(frozen=True)
class StoredSummary:
    """summary.json of a run at the current version, typed (read_summary); `derived` when the run had none and it was
    summarised from its stored requests table."""

    load: LoadSummary
    span_s: float
    options: SummaryOptions
    schema_version: int = SUMMARY_SCHEMA_VERSION
    derived: bool = False
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # what the writer added: load_mode, stopped, client_process ...

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = SUMMARY_FILE) -> "StoredSummary":
        """From a document at the current version (load_versioned applied)."""
        if "load" not in doc:
            raise HarnessError(f"{source} has no 'load' summary; delete it to summarise the run from its requests table.")
        rest = {k: v for k, v in doc.items() if k not in ("load", "span_s", "options", "schema_version", "derived", "note")}
        return cls(LoadSummary.from_dict(doc["load"], source), float(doc.get("span_s") or 0.0), _options_from(doc.get("options")),
                   int(doc.get("schema_version", SUMMARY_SCHEMA_VERSION)), bool(doc.get("derived", False)), doc.get("note"), rest)


def read_summary(run: Any) -> StoredSummary:
    """summary.json of `run` at the current version; a run without one (killed, imported) gets the summary derived from
    its stored requests table, marked `derived`."""
    side = _read_summary_file(run)
    if side is not None:
        return StoredSummary.from_dict(side, str(run.path / SUMMARY_FILE))
    if "requests" not in run.tables():
        raise HarnessError(f"run {run.path} has neither {SUMMARY_FILE} nor a requests table; it measured nothing to summarise.")
    options = summary_options_of(run)
    span_s = span_of(run)
    return StoredSummary(summarise_run(run, options=options, span_s=span_s), span_s, options, derived=True,
                         note=f"no {SUMMARY_FILE} (run status {run.manifest.status}): summarised from the stored requests table")


def _read_summary_file(run: Any) -> dict[str, Any] | None:
    path = run.path / SUMMARY_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HarnessError(f"{path} cannot be read ({exc}); delete it and `harness report {run.path}` summarises the run "
                           "from its requests table.") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{path} is not a JSON object; delete it to summarise the run from its requests table.")

    return load_versioned(data, SUMMARY_SCHEMA_VERSION, SUMMARY_UPGRADES, str(path), default=1, what=SUMMARY_FILE,
                          fix="delete the file to summarise the run from its requests table")
