"""Step 4 of the CPU loop: compare predicted with measured, and say which roofline term is wrong and by how much."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.loop.measure import MEASURED_MEDIAN_CONFIDENCE, CpuShare, Measured
from harness.loop.predict import Predicted

@dataclass(frozen=True)
class Comparison:
    quantity: str
    predicted: float
    measured: float  # engine-side
    measured_client: float | None
    error_pct: float  # (predicted - measured) / measured
    bound: str
    compute_s: float
    memory_s: float
    verdict: str
    engine_cpu_share: float | None = None
    contended: bool = False  # the engine got less than CpuShare.SHARE_OK of its cores: rerun on an idle host

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



def _is_time(q: str) -> bool:
    """A duration (ttft_s), not a rate (prefill_tokens_per_s)."""
    return q.endswith("_s") and not q.endswith("_per_s")


def verdict(p: Predicted, measured: float) -> str:
    """Which roofline term is wrong and by how much, stated from the measurement."""
    if _is_time(p.quantity):
        actual_s = measured
    else:
        units = p.value * max(p.compute_s, p.memory_s)  # tokens in the unit of work
        actual_s = units / measured
    term_s = p.compute_s if p.bound == "compute" else p.memory_s
    other_s = p.memory_s if p.bound == "compute" else p.compute_s
    ratio = actual_s / term_s if term_s > 0 else math.inf
    if abs(ratio - 1) <= 0.2:
        return f"within 20%: the {p.bound} term ({term_s * 1e3:.3g} ms) explains the measured {actual_s * 1e3:.3g} ms"
    if ratio > 1:
        implied = (p.flops if p.bound == "compute" else p.bytes) / actual_s
        unit = "GFLOP/s" if p.bound == "compute" else "GB/s"
        return (f"the {p.bound} term is {ratio:.2f}× too small ({term_s * 1e3:.3g} ms predicted, {actual_s * 1e3:.3g} ms "
                f"measured): the engine reaches {implied / 1e9:.3g} {unit} on this work, not the calibrated "
                f"{(p.flops if p.bound == 'compute' else p.bytes) / term_s / 1e9:.3g}; the other term is {other_s * 1e3:.3g} ms")
    return (f"the engine is {1 / ratio:.2f}× faster than the {p.bound} term ({term_s * 1e3:.3g} ms predicted, "
            f"{actual_s * 1e3:.3g} ms measured): the calibrated constant understates what the engine's kernels reach")


def compare(predicted: list[Predicted], measured: list[Measured]) -> list[Comparison]:
    by_q = {m.quantity: m for m in measured}
    out = []
    for p in predicted:
        m = by_q.get(p.quantity)
        if m is None:
            continue
        contended = m.engine_cpu_share is not None and m.engine_cpu_share < CpuShare.SHARE_OK
        v = verdict(p, m.value)
        if contended:
            v = (f"CONTENDED: the engine got {m.engine_cpu_share:.0%} of its cores while measured (other processes ran); "
                 f"the number reflects that, rerun on an idle host. {v}")
        out.append(Comparison(p.quantity, p.value, m.value, m.client_value, (p.value - m.value) / m.value * 100.0,
                              p.bound, p.compute_s, p.memory_s, v, m.engine_cpu_share, contended))
    return out




# ---------------------------------------------------------------- served load

# the targets on held-out, uncontended points (issue 15): capacity within 5 %, TTFT p50 and TPOT p50 within 10 %
TARGETS_PCT = {"capacity_rps": 5.0, "ttft_p50_s": 10.0, "tpot_p50_s": 10.0}
# How well-conditioned a judged figure is: the twin's own prediction with every step time x (1 - d) ... x (1 + d). d = 2 %:
# the spread of the isolated decode step between the stage windows of a run on a quiet host (1-2 %, 2026-12-02 07:35),
# so a figure whose prediction leaves its target within +-2 % of step time cannot be predicted to that target from
# step times measured to that precision (e.g. a TTFT p50 at a cliff between requests that found a slot and requests
# that waited: 128/256 x 0.8, p50 269 ms at x 0.99 and 1064 ms at x 1.01).
CONDITION_STEP_PCT = 2.0
SERVED_METRICS = ("request_throughput_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "e2e_p50_s")
# the judged medians and the prefix of the ServedMeasurement fields holding each one's interval (<prefix>_s, at
# MEASURED_MEDIAN_CONFIDENCE) and the requests it was taken over (<prefix>_n; harness.loop.measure)
MEASURED_MEDIAN_INTERVALS = {"ttft_p50_s": "ttft_p50_interval", "tpot_p50_s": "tpot_p50_interval"}


@dataclass(frozen=True)
class ServedComparison:
    """One metric at one (mix, rate) point: the twin's prediction against the load generator's measurement."""

    mix: str
    point: int
    rate_per_s: float
    rate_fraction_of_capacity: float
    metric: str
    predicted: float | None
    measured: float | None
    error_pct: float | None  # (predicted − measured) / measured
    held_out: bool  # no part of this point was used to fit anything the prediction uses
    contended: bool  # the engine got < 85 % of its cores while it had work: excluded from the verdict
    engine_cpu_share: float | None
    target_pct: float | None  # the tolerance for this metric (None: reported, not judged)
    met: bool | None  # within target (None: not judged: no target, contended, or missing)
    note: str = ""
    band_lo: float | None = None  # the lowest and highest prediction by the twin of any one stage window alone
    band_hi: float | None = None  # (harness.loop.windows): how far the host's own drift moves the prediction
    cond_lo: float | None = None  # the lowest and highest prediction of the same twin with every step time
    cond_hi: float | None = None  # x (1 -/+ CONDITION_STEP_PCT %): how sensitive the figure is to the step times
    speed_scale: float | None = None  # the step-time factor fitted on the point's own requests' E2E (harness.loop.speed)
    at_speed: float | None = None  # the same twin's figure at that factor: a diagnostic, not held out, never judged
    meas_lo: float | None = None  # the distribution-free 95 % interval of the measured median (MEASURED_MEDIAN_CONFIDENCE;
    meas_hi: float | None = None  # harness.compare.stats.median_interval): how far the point's own sample pins its p50
    meas_n: int | None = None  # how many requests that interval was taken over
    sentinel_scale: float | None = None  # the host sentinel's CPU time per read during the point over the stage windows'
    at_sentinel: float | None = None  # (harness.telemetry.sentinel) and the same twin's figure with every step × it
    repeat_values: tuple[float, ...] | None = None  # each repeat's figure when the workload was measured back to back
    # (--repeats), in order; `measured` is their median

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def within_band(self) -> bool | None:
        """The measured figure lies between the single windows' predictions, widened by the target (None: no band)."""
        if self.band_lo is None or self.band_hi is None or self.measured is None or self.target_pct is None:
            return None
        lo, hi = self.band_lo / (1 + self.target_pct / 100.0), self.band_hi / (1 - self.target_pct / 100.0)
        return bool(lo <= self.measured <= hi)

    @property
    def met_at_speed(self) -> bool | None:
        """The twin at the point's own fitted speed is within target of the measurement (None: not fitted, no target, or
        nothing measured). Not held out: the speed comes from the point's requests; it says how much of a miss the
        host's speed during the point explains, and the verdict never counts it."""
        if self.at_speed is None or self.measured is None or not self.measured or self.target_pct is None:
            return None
        return bool(abs(self.at_speed / self.measured - 1) * 100.0 <= self.target_pct)

    @property
    def met_at_sentinel(self) -> bool | None:
        """The twin at the host sentinel's speed for the point is within target of the measurement (None: no sentinel
        speed, no target, or nothing measured). Held out: the sentinel is host telemetry (a memory-bound read timed on
        its own CPU clock, beside the engine), no served measurement enters it; reported beside the verdict, which
        counts the windows' prediction alone."""
        if self.at_sentinel is None or self.measured is None or not self.measured or self.target_pct is None:
            return None
        return bool(abs(self.at_sentinel / self.measured - 1) * 100.0 <= self.target_pct)

    @property
    def measured_precise(self) -> bool | None:
        """The measured median's interval lies within target of the measured figure: the point's sample pins its own p50
        as tightly as the target asks (None: no interval, too few requests, or no target)."""
        if self.meas_lo is None or self.meas_hi is None or self.measured is None or not self.measured or self.target_pct is None:
            return None
        t = self.target_pct / 100.0
        return bool(self.measured * (1 - t) <= self.meas_lo and self.meas_hi <= self.measured * (1 + t))

    @property
    def requests_to_pin(self) -> int | None:
        """About how many requests would pin this median within its target, from the `meas_n` its interval was
        measured over: the order-statistic interval narrows as 1/√n once n is large, so n × (its half-width over the
        target)², the half-width the wider side relative to the measured figure. Rough (it assumes the spread stays as
        measured, and a median in a gap between two clusters narrows more slowly); None when the interval is already
        within target, or there is none."""
        if self.measured_precise is not False or not self.meas_n:
            return None
        hw = max(self.measured - self.meas_lo, self.meas_hi - self.measured) / self.measured  # type: ignore[operator]
        return int(math.ceil(self.meas_n * (hw / (self.target_pct / 100.0)) ** 2))  # type: ignore[operator]

    @property
    def predicted_in_measured_interval(self) -> bool | None:
        """The prediction lies inside the measured median's interval: this sample cannot tell the two apart (None: no
        interval or no prediction). Never counted in the verdict: a figure outside target stays outside."""
        if self.meas_lo is None or self.meas_hi is None or self.predicted is None:
            return None
        return bool(self.meas_lo <= self.predicted <= self.meas_hi)

    def _repeats(self) -> list[float] | None:
        """The repeats' finite positive figures, when there are at least 2 and a target (else None)."""
        v = [x for x in (self.repeat_values or ()) if x is not None and math.isfinite(x) and x > 0]
        return v if len(v) >= 2 and self.target_pct is not None else None

    @property
    def repeat_agreement(self) -> float | None:
        """The engine against itself: of the ordered pairs of repeats (i, j), i ≠ j, the share where repeat i taken as the
        prediction of repeat j is within target (None: under 2 repeats or no target). Back to back on the same
        workload, no model term enters: it says how closely this host reproduces the figure at the target's tolerance.
        Not a ceiling on the verdict: the verdict judges against the repeats' median, whose noise is smaller than one
        repeat's, and an exact prediction sits between the repeats rather than on one of them."""
        v = self._repeats()
        if v is None:
            return None
        pairs = [(a, b) for i, a in enumerate(v) for j, b in enumerate(v) if i != j]
        return sum(1 for a, b in pairs if abs(a / b - 1) * 100.0 <= self.target_pct) / len(pairs)

    @property
    def repeats_apart(self) -> bool | None:
        """The repeats lie so far apart that no single figure is within target of every one of them (the highest over
        the lowest past (1 + t) / (1 − t)); None under 2 repeats or no target."""
        v = self._repeats()
        if v is None:
            return None
        t = self.target_pct / 100.0  # type: ignore[operator]
        return bool(max(v) / min(v) > (1 + t) / (1 - t))

    @property
    def ill_conditioned(self) -> bool | None:
        """A change of CONDITION_STEP_PCT % in every step time moves the twin's own prediction beyond the target (None:
        not computed, or no target). A property of the prediction alone: the measurement does not enter it."""
        if self.cond_lo is None or self.cond_hi is None or self.predicted is None or not self.predicted or self.target_pct is None:
            return None
        dev = max(abs(self.cond_lo / self.predicted - 1), abs(self.cond_hi / self.predicted - 1)) * 100.0
        return bool(dev > self.target_pct)


def _err(p: float | None, m: float | None) -> float | None:
    if p is None or m is None or not m or not math.isfinite(p) or not math.isfinite(m):
        return None
    return (p - m) / m * 100.0


def repeat_spread_pct(values: list[float | None]) -> float | None:
    """(max − min) / median of one figure over repeated measurements of the same artifact, in %; None below 2 values."""
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if len(v) < 2:
        return None
    mid = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return (v[-1] - v[0]) / mid * 100.0 if mid else None


def _time_text(v: float) -> str:
    return f"{v * 1e3:.0f} ms" if v < 10 else f"{v:.1f} s"


def _repeats_note(what: str, vals: tuple[float | None, ...], target_pct: float, fmt: Any) -> str:
    """The note on a judged figure measured several times: each repeat's figure (`fmt`) and, with 2 or more, their spread
    over the median, flagged when it is wider than twice the target."""
    sp = repeat_spread_pct(list(vals))
    shown = ", ".join("—" if v is None else fmt(v) for v in vals)
    return (f"{len(vals)} repeats of the same {what}: {shown}" + ("" if sp is None else
            f" (spread {sp:.0f} % of the median{', wider than the target' if sp > 2 * target_pct else ''})"))


def compare_served(mix: str, point: int, rate: float, fraction: float, pred: Any, meas: Any, *, held_out: bool = True,
                   repeats: list[Any] | None = None) -> list[ServedComparison]:
    """Every served metric at one point; `pred` a ServedFigures, `meas` a ServedMeasurement (with `repeats`, the
    median of the repeated measurements, each in `repeats`: the spread of each judged figure goes into its note)."""
    out = []
    cut = int((getattr(meas, "errors_by_class", None) or {}).get("cancelled", 0))
    note = (f"{cut} requests were still running at the drain limit (--quick) and were cancelled: the measured figures "
            "cover the completed ones only and are not judged") if cut else ""
    for metric in SERVED_METRICS:
        p, m = getattr(pred, metric), getattr(meas, metric)
        e = _err(p, m)
        tgt = TARGETS_PCT.get(metric)
        met = None if (tgt is None or e is None or meas.contended or not held_out or cut) else bool(abs(e) <= tgt)
        row_note = note if tgt is not None else ""
        rv = tuple(getattr(r, metric) for r in repeats) if repeats and len(repeats) > 1 and tgt is not None else None
        if rv is not None and repeat_spread_pct(list(rv)) is not None:
            row_note = "; ".join(x for x in (row_note, _repeats_note("workload", rv, tgt, _time_text)) if x)  # type: ignore[arg-type]
        field = MEASURED_MEDIAN_INTERVALS.get(metric)
        iv = getattr(meas, f"{field}_s", None) if field else None
        out.append(ServedComparison(mix, point, rate, fraction, metric, p, m, e, held_out, meas.contended, meas.engine_cpu_share, tgt, met,
                                    row_note, meas_lo=iv[0] if iv else None, meas_hi=iv[1] if iv else None,
                                    meas_n=getattr(meas, f"{field}_n", None) if iv else None, repeat_values=rv))
    return out


def _capacity_row(mix: str, point: int, rate: float, fraction: float, predicted_rps: float, meas: Any, note: str,
                  judgeable: bool, held_out: bool) -> ServedComparison:
    """The capacity row: judged when the measurement is one (`judgeable`), held out and not contended."""
    m = meas.saturated_rps
    e = _err(predicted_rps, m)
    tgt = TARGETS_PCT["capacity_rps"]
    met = bool(abs(e) <= tgt) if judgeable and e is not None and not meas.contended and held_out else None  # bool(): a numpy
    # bool would render as "not judged" (it is not `False`)
    return ServedComparison(mix, point, rate, fraction, "capacity_rps", predicted_rps, m, e, held_out, meas.contended,
                            meas.engine_cpu_share, tgt, met, note)


def compare_capacity(mix: str, point: int, rate: float, fraction: float, predicted_rps: float, meas: Any, *,
                     held_out: bool = True) -> ServedComparison:
    """Predicted saturation capacity against the measured completion rate at a point above predicted capacity.

    The measurement is a capacity only when the engine was saturated there: served less than 97 % of what
    was offered. Otherwise it is a lower bound (the twin under-predicted capacity) and is reported, not judged."""
    saturated = meas.request_throughput_per_s < 0.97 * rate
    note = ("measured: output tokens/s between the 20th and 80th percentile completion at this overloaded point, over the "
            "mean output" if saturated else
            f"not saturated at {rate:.3g} req/s (served {meas.request_throughput_per_s:.3g}/s): the measured figure is "
            "a lower bound on capacity, not judged")
    return _capacity_row(mix, point, rate, fraction, predicted_rps, meas, note, saturated, held_out)


def compare_capacity_burst(mix: str, point: int, n_requests: int, predicted_rps: float, meas: Any, *,
                           held_out: bool = True, repeats: list[Any] | None = None) -> ServedComparison:
    """Predicted capacity against the capacity measurement: `n_requests` requests sent at once (offered rate
    unbounded, so rate and fraction are inf), requests/s by harness.target.saturation (output tokens between the 20th
    and 80th percentile completion over the mean output); the twin predicted the same statistic for the same requests.
    Judged when every request completed and the engine was not contended; a burst with failures is reported, not
    judged. With `repeats` (the same burst sent again back to back), `meas` is their median and each repeat's figure is
    kept beside it."""
    sent = n_requests * (len(repeats) if repeats else 1)
    complete = meas.requests_ok >= sent
    note = (f"measured: output tokens/s between the 20th and 80th percentile completion of {n_requests} requests sent at once, "
            "over the mean output (the twin predicts the same statistic for the same requests)"
            + ("" if complete else f"; only {meas.requests_ok} of {sent} completed ({meas.errors_by_class}), not judged"))
    row = _capacity_row(mix, point, math.inf, math.inf, predicted_rps, meas, note, complete, held_out)
    if repeats and len(repeats) > 1:
        vals = tuple(r.saturated_rps for r in repeats)
        extra = _repeats_note("burst", vals, TARGETS_PCT["capacity_rps"], lambda v: f"{v:.3f}/s")
        row = replace(row, note=f"{row.note}; {extra}", repeat_values=vals)
    return row


@dataclass(frozen=True)
class Verdict:
    judged: int
    met: int
    contended_points: int
    points: int
    failures: tuple[str, ...]

    @property
    def all_met(self) -> bool:
        return self.judged > 0 and self.met == self.judged

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "all_met": self.all_met}


def band_summary(rows: list[ServedComparison]) -> tuple[int, int, int] | None:
    """Of the judged figures outside target: (how many, how many of them the host's drift between the stage windows
    explains — the measurement is within target of some single window's prediction —, how many it does not); None
    when no row has a band."""
    if not any(r.band_lo is not None for r in rows):
        return None
    miss = [r for r in rows if r.met is False]
    inside = sum(1 for r in miss if r.within_band)
    return len(miss), inside, len(miss) - inside


@dataclass(frozen=True)
class ConditionSummary:
    """The judged figures split by conditioning (ServedComparison.ill_conditioned)."""

    misses: int  # judged figures outside target
    ill_conditioned_misses: int  # of them, at figures a ±CONDITION_STEP_PCT % step-time change moves past the target
    well_conditioned_judged: int
    well_conditioned_met: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def condition_summary(rows: list[ServedComparison]) -> ConditionSummary | None:
    """None when no judged row has its conditioning computed."""
    judged = [r for r in rows if r.met is not None and r.ill_conditioned is not None]
    if not judged:
        return None
    well = [r for r in judged if not r.ill_conditioned]
    return ConditionSummary(sum(1 for r in judged if not r.met), sum(1 for r in judged if not r.met and r.ill_conditioned),
                            len(well), sum(1 for r in well if r.met))


@dataclass(frozen=True)
class SpeedSummary:
    """The judged figures against the twin at each point's own fitted speed (ServedComparison.met_at_speed)."""

    judged: int  # judged figures with a fitted speed
    met_at_speed: int  # of them, within target at their point's own speed
    misses: int  # of them, outside target as predicted
    misses_met_at_speed: int  # of the misses, within target at their point's own speed: the host's speed explains them
    scale_lo: float  # the fitted factors' range over those points
    scale_hi: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def speed_summary(rows: list[ServedComparison], source: str = "speed") -> SpeedSummary | None:
    """None when no judged row has a speed from `source`: "speed", fitted on each point's own requests
    (met_at_speed), or "sentinel", the host sentinel's (met_at_sentinel)."""
    scale_of, met_of = ((lambda r: r.speed_scale), (lambda r: r.met_at_speed)) if source == "speed" else \
        ((lambda r: r.sentinel_scale), (lambda r: r.met_at_sentinel))
    judged = [r for r in rows if r.met is not None and met_of(r) is not None and scale_of(r) is not None]
    if not judged:
        return None
    miss = [r for r in judged if not r.met]
    scales = [scale_of(r) for r in judged]
    return SpeedSummary(len(judged), sum(1 for r in judged if met_of(r)), len(miss), sum(1 for r in miss if met_of(r)),
                        min(scales), max(scales))


@dataclass(frozen=True)
class PrecisionSummary:
    """The judged medians against their own sample's interval (ServedComparison.measured_precise and
    predicted_in_measured_interval): how many points could test the target at all, and how many misses the sample
    cannot tell from the prediction."""

    judged: int  # judged medians (TTFT, TPOT p50)
    too_few: int  # of them, measured over too few requests for a 95 % interval (below 6)
    precise: int  # of them, with an interval within target of the measured figure
    misses: int  # judged medians outside target
    misses_inside: int  # of the misses, with the prediction inside the measured median's interval

    @property
    def wider(self) -> int:
        """Judged medians with an interval wider than their target."""
        return self.judged - self.precise - self.too_few

    def counts_text(self) -> str:
        """The counts, as the report's verdict line and the run's note both give them."""
        return (f"of the {self.judged} judged medians, {self.precise} were pinned by their point's own sample within target, "
                f"{self.wider} less tightly, {self.too_few} had under 6 requests (no {MEASURED_MEDIAN_CONFIDENCE:.0%} interval "
                f"exists); of the {self.misses} outside target, {self.misses_inside} have the prediction inside the measured "
                "interval (the sample cannot tell them apart; still counted as misses)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def precision_summary(rows: list[ServedComparison]) -> PrecisionSummary | None:
    """None when no judged median has an interval (a run stored before intervals, or every point under 6 requests)."""
    judged = [r for r in rows if r.met is not None and r.metric in MEASURED_MEDIAN_INTERVALS]
    if not any(r.meas_lo is not None for r in judged):
        return None
    miss = [r for r in judged if not r.met]
    return PrecisionSummary(len(judged), sum(1 for r in judged if r.meas_lo is None), sum(1 for r in judged if r.measured_precise),
                            len(miss), sum(1 for r in miss if r.predicted_in_measured_interval))


@dataclass(frozen=True)
class RepeatabilitySummary:
    """The judged figures measured more than once back to back (ServedComparison.repeat_agreement, repeats_apart): how
    often the engine reproduces its own figure within target on this host, read beside the verdict."""

    judged: int  # judged figures with ≥ 2 repeats
    repeats: int  # the most repeats any of them has
    agreement: float  # the mean over them of repeat_agreement: the expected count within target is agreement × judged
    apart: int  # of them, with repeats so far apart that no single figure is within target of all
    met: int  # of them, within target as predicted (the verdict's count over the same figures)

    def counts_text(self) -> str:
        """The counts, as the report's verdict line and the run's note both give them."""
        return (f"of the {self.judged} judged figures measured {self.repeats} times back to back, one repeat taken as the "
                f"prediction of another is within target for {self.agreement:.0%} of the pairs (as if {self.agreement * self.judged:.1f} "
                f"of {self.judged} figures within target), and {self.apart} have repeats so far apart that no single "
                f"figure is within target of them all; the twin's prediction: {self.met} of {self.judged} within target of "
                "the repeats' median (a median is steadier than one repeat)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def repeatability_summary(rows: list[ServedComparison]) -> RepeatabilitySummary | None:
    """None when no judged row was measured more than once."""
    judged = [r for r in rows if r.met is not None and r.repeat_agreement is not None]
    if not judged:
        return None
    return RepeatabilitySummary(len(judged), max(len(r.repeat_values or ()) for r in judged),
                                sum(r.repeat_agreement for r in judged) / len(judged),  # type: ignore[misc]
                                sum(1 for r in judged if r.repeats_apart), sum(1 for r in judged if r.met))


def served_verdict(rows: list[ServedComparison]) -> Verdict:
    judged = [r for r in rows if r.met is not None]
    pts = {(r.mix, r.point) for r in rows}
    cont = {(r.mix, r.point) for r in rows if r.contended}
    fails = tuple(f"{r.mix} @ {_rate_text(r.rate_per_s)}: {r.metric} {r.error_pct:+.1f}% (target ±{r.target_pct:g}%)"
                  for r in judged if not r.met)
    return Verdict(len(judged), sum(1 for r in judged if r.met), len(cont), len(pts), fails)


def _rate_text(rate_per_s: float) -> str:
    return f"{rate_per_s:.3g} req/s" if math.isfinite(rate_per_s) else "a burst (all requests at once)"
