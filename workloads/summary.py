"""Summary of a load run from its per-request records: windowed throughput, latency percentiles, goodput, validity.

The measurement window is [warmup_s, span_s − cooldown_s) of the schedule; requests whose intended
send falls in it are measured. Throughput counts content events (and completed requests) whose
arrival falls in the window. Goodput counts, on the same basis as request throughput, completions in
the window that succeeded and met every SLO given (TTFT and E2E from the intended send, TPOT);
goodput_fraction is the share of measured requests that did. The run is invalid when the client fell behind
its own schedule (p99 send lag above max_lag_p99_s, or fewer sends in the window than intended by more
than max_send_shortfall), when more than max_error_fraction of the sent requests failed, or when the
window is empty.

Two throughput headlines, labelled, side by side: `request_throughput_per_s` (steady state: completions
inside the window ÷ the window) and `request_throughput_incl_drain_per_s` (vLLM `bench serve`'s
definition: every successful completion ÷ the run's duration from t0 to the last completion, so the
startup backlog and the drain are inside it). When no completion lands in the window, `window_note` says
why instead of a bare 0.

`summarise_run` summarises a stored run from its stored requests table (what the load process does at the
end of a run, so a killed or imported run summarises the same way); `read_summary` reads the versioned
summary.json sidecar as a typed `StoredSummary` (its `load` a LoadSummary whose latency and lag distributions are
harness.served.Percentiles), or derives it from the table when the run has none. The stored shape is unchanged:
each Percentiles is written as its {count, mean, p50, p90, p99, max} dict, so old runs read as they are.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Mapping

import numpy as np

from harness.errors import HarnessError
from harness.served import Percentiles
from workloads.config import SummaryOptions

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
            kw[f.name] = v
        return cls(**kw)


_PERCENTILE_FIELDS = frozenset(("ttft_s", "ttft_from_intended_s", "tpot_s", "itl_s", "e2e_s", "e2e_from_intended_s", "schedule_lag_s"))


def measured_requests(df: Any, *, span_s: float, options: SummaryOptions = SummaryOptions()) -> tuple[Any, Any]:
    """(measured, ok): the requests whose intended send falls in the window [warm-up, span − cool-down), and those of
    them that succeeded, which the latency percentiles cover."""
    if not len(df):
        return df, df
    w0 = options.warmup_s
    intended = df["intended_ns"].to_numpy(dtype=float) / 1e9
    measured = df[(intended >= w0) & (intended < max(w0, span_s - options.cooldown_s))]
    return measured, measured[measured["error_class"] == "ok"]


def summarise(df: Any, *, span_s: float, options: SummaryOptions = SummaryOptions()) -> LoadSummary:
    """`df`: the run's requests table (pandas); `span_s`: the schedule's length in seconds."""
    o = options
    w0 = o.warmup_s
    w1 = max(w0, span_s - o.cooldown_s)
    empty_window = w1 <= w0
    win = max(w1 - w0, 1e-9)
    n_total = int(len(df))
    measured, ok = measured_requests(df, span_s=span_s, options=o)
    errors = {str(k): int(v) for k, v in df["error_class"].value_counts().items()} if n_total else {}

    # throughput: completions and content events landing inside the window
    last = df["last_byte_ns"].to_numpy(dtype=float) / 1e9 if n_total else np.zeros(0)
    is_ok = (df["error_class"] == "ok").to_numpy() if n_total else np.zeros(0, bool)
    done_in = is_ok & (last >= w0) & (last < w1)
    chunk_times = np.concatenate([np.asarray(c, dtype=float) for c in df["chunk_ns"]]) / 1e9 if n_total else np.zeros(0)
    tokens_in = int(((chunk_times >= w0) & (chunk_times < w1)).sum())
    usage_tokens = df.loc[done_in, "output_tokens_usage"].fillna(df.loc[done_in, "output_tokens_chunks"]).sum() if n_total else 0

    itls: list[float] = []
    for c in ok["chunk_ns"] if len(ok) else []:
        a = np.asarray(c, dtype=float)
        if a.size >= 2:
            itls.extend((np.diff(a) / 1e9).tolist())

    slo = {"ttft_s": o.slo_ttft_s, "tpot_s": o.slo_tpot_s, "e2e_s": o.slo_e2e_s}
    goodput = frac = None
    if any(v is not None for v in slo.values()):
        def meets_slo(rows: Any) -> np.ndarray:
            good = np.ones(len(rows), dtype=bool)
            if o.slo_ttft_s is not None:
                good &= rows["ttft_from_intended_s"].fillna(np.inf).to_numpy(dtype=float) <= o.slo_ttft_s
            if o.slo_tpot_s is not None:
                good &= rows["tpot_s"].fillna(0.0).to_numpy(dtype=float) <= o.slo_tpot_s
            if o.slo_e2e_s is not None:
                good &= rows["e2e_from_intended_s"].to_numpy(dtype=float) <= o.slo_e2e_s
            return good

        # goodput on the same basis as request throughput (completions landing in the window), so it never exceeds it;
        # the fraction is over the measured requests (intended send in the window)
        goodput = float(meets_slo(df[done_in]).sum()) / win if n_total else 0.0
        frac = float(meets_slo(ok).sum()) / len(measured) if len(measured) else None

    sent = df[df["error_class"] != "not_sent"] if n_total else df
    lag = Percentiles.from_values(sent["schedule_lag_s"].tolist() if len(sent) else [])
    sent_s = sent["sent_ns"].to_numpy(dtype=float) / 1e9 if len(sent) else np.zeros(0)
    n_intended = int(len(measured))  # intended send in the window
    n_sent = int(((sent_s >= w0) & (sent_s < w1)).sum())
    reasons = []
    if empty_window:
        reasons.append(f"the measurement window [{w0:g}, {span_s - o.cooldown_s:g}) s is empty: warm-up {o.warmup_s:g} s and "
                       f"cool-down {o.cooldown_s:g} s leave nothing of the {span_s:g} s schedule")
    n_tried = int((df["error_class"] != "not_sent").sum()) if n_total else 0
    n_failed = int(((df["error_class"] != "ok") & (df["error_class"] != "not_sent")).sum()) if n_total else 0
    err_frac = n_failed / n_tried if n_tried else 0.0
    if n_tried and err_frac > o.max_error_fraction:
        top = ", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]) if k not in ("ok", "not_sent"))
        reasons.append(f"{n_failed} of {n_tried} sent requests failed ({err_frac:.0%}, above the {o.max_error_fraction:.0%} allowed): {top}")
    if n_total and n_tried == 0:
        reasons.append("no request was sent")
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
    # vLLM bench serve: completed / (start .. last completion); t0 is the first intended send
    ok_all = df[is_ok] if n_total else df
    duration = float(last[is_ok].max()) if n_total and is_ok.any() else 0.0
    out_all = float(ok_all["output_tokens_usage"].fillna(ok_all["output_tokens_chunks"]).sum()) if len(ok_all) else 0.0
    note = None
    if not empty_window and not done_in.any():
        if not is_ok.any():
            note = "no request succeeded, so no throughput was measured"
        else:
            first_done = float(last[is_ok].min())
            first_tok = df.loc[is_ok, "first_token_ns"].dropna() if "first_token_ns" in df.columns else []
            ft = float(first_tok.min()) / 1e9 if len(first_tok) else first_done
            note = (f"no request completed inside the window [{w0:g}, {w1:g}) s: the first completion came at {first_done:.1f} s "
                    f"(first token at {ft:.1f} s), so the server was still working off its startup backlog; measure a longer "
                    "run or move the window after the backlog (--warmup-s), and read the drain-inclusive figure meanwhile")
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
        errors_by_class=errors, request_throughput_per_s=float(done_in.sum()) / win, output_tokens_per_s=tokens_in / win,
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
    )


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
    import pandas as pd

    df = run.table("requests") if "requests" in run.tables() else pd.DataFrame()  # nothing recorded: an empty summary
    return summarise(df, span_s=span_of(run) if span_s is None else span_s,
                     options=summary_options_of(run) if options is None else options)


def summary_document(summary: LoadSummary, *, span_s: float, options: SummaryOptions, **extra: Any) -> dict[str, Any]:
    """What summary.json holds (versioned; `extra` e.g. client_process)."""
    from harness.versioning import stamp_version

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
    import json

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
    from harness.versioning import load_versioned

    return load_versioned(data, SUMMARY_SCHEMA_VERSION, SUMMARY_UPGRADES, str(path), default=1, what=SUMMARY_FILE,
                          fix="delete the file to summarise the run from its requests table")
