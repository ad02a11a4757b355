"""Served-load records shared by every predicted-against-measured path: one served point, its prediction, its
measurement, their comparison; percentiles; the one error convention.

- `ServedPoint`: where a figure was taken: the workload's prompt/output lengths and the offered load (an open-loop
  arrival rate, `math.inf` for every request at once, or a closed-loop concurrency).
- `ServedPrediction`: what a predictor (a twin, the model, another tool) says the point serves; `simulated` by default.
- `ServedMeasurement`: what a measurement saw there, with the interval of a figure where one was taken and the repeats
  kept when the figures are their median.
- `ServedComparison`: one `MetricComparison` row per metric, made by the one function `compare_served`.

`Percentiles` is the summary of one latency (or lag) distribution: count, mean, p50, p90, p99, max, in the
quantity's base unit (seconds for latencies). It replaces the `{"count", "mean", "p50", ...}` dicts; `to_dict`
writes exactly that dict, so stored documents keep their shape, and `from_dict` reads it back.

A metric is named as users know it (`ttft_p50_s`, `request_throughput_per_s`; `METRICS` holds every name with its
label and unit). The error convention, everywhere a prediction meets a measurement: `relative_error(predicted,
measured)` = (predicted − measured) / measured, signed, stored as a fraction; a target is a fraction too (0.10 for
±10 %); `fmt_error_pct` shows either as a percentage (harness.units.fmt_pct).

Records turn into dicts only at the store: `to_dict` / `from_dict` (nested, inside the versioned document of their
owner, e.g. loop_report.json) and `comparison_rows` / `comparisons_from_rows` (one flat row per metric, for a table the
store writes; the store stamps and upgrades its schema_version like every table's, harness.records).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.units import fmt_pct

PERCENTILE_FIELDS = ("count", "mean", "p50", "p90", "p99", "max")


@dataclass(frozen=True, slots=True)
class Percentiles:
    """One distribution's summary; every statistic is None when no value was finite (count 0)."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise HarnessError(f"Percentiles.count must be an integer >= 0, got {self.count!r}")
        for name in PERCENTILE_FIELDS[1:]:
            v = getattr(self, name)
            if v is not None and not isinstance(v, (int, float)):
                raise HarnessError(f"Percentiles.{name} must be a number or None, got {v!r}")

    @classmethod
    def from_values(cls, values: Iterable[Any]) -> "Percentiles":
        """Percentiles of the finite values (None and NaN are skipped); numpy's linear interpolation."""
        a = np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)
        if a.size == 0:
            return cls()
        p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
        return cls(int(a.size), float(a.mean()), p50, p90, p99, float(a.max()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | "Percentiles" | None, *, source: str = "percentiles") -> "Percentiles":
        """The record from its stored dict (missing statistics read as None); None reads as an empty distribution."""
        if data is None:
            return cls()
        if isinstance(data, Percentiles):
            return data
        if not isinstance(data, Mapping):
            raise HarnessError(f"{source}: expected a mapping of {', '.join(PERCENTILE_FIELDS)}, got {type(data).__name__}")
        count = data.get("count", 0)
        try:
            count = int(count or 0)
        except (TypeError, ValueError):
            raise HarnessError(f"{source}: count must be an integer, got {count!r}") from None
        vals = {}
        for name in PERCENTILE_FIELDS[1:]:
            v = data.get(name)
            try:
                vals[name] = None if v is None else float(v)
            except (TypeError, ValueError):
                raise HarnessError(f"{source}: {name} must be a number or null, got {v!r}") from None
        return cls(count, **vals)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def get(self, name: str) -> float | int | None:
        """The statistic called `name` (one of PERCENTILE_FIELDS); for code that picks it from a user's choice."""
        if name not in PERCENTILE_FIELDS:
            raise HarnessError(f"no statistic {name!r} in Percentiles; known: {', '.join(PERCENTILE_FIELDS)}")
        return getattr(self, name)

    @property
    def empty(self) -> bool:
        """No statistic at all (a predictor that gives a p50 without a count is not empty)."""
        return self.count == 0 and all(getattr(self, n) is None for n in PERCENTILE_FIELDS[1:])


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    """(predicted − measured) / measured as a signed fraction; None when either is missing or not finite, or the
    measurement is 0 (no relative error exists then)."""
    if predicted is None or measured is None:
        return None
    p, m = float(predicted), float(measured)
    if not (math.isfinite(p) and math.isfinite(m)) or m == 0:
        return None
    return (p - m) / m


def fmt_error_pct(error: float | None, *, digits: int = 1) -> str:
    """A relative error (fraction) as a signed percentage ("+12.3%"), '—' when there is none."""
    return fmt_pct(error, digits, missing="—", sign=True)



LATENCIES = ("ttft_s", "tpot_s", "e2e_s")  # the Percentiles fields of a prediction and a measurement
LATENCY_STATISTICS = ("mean", "p50", "p90", "p99")
RATES = ("capacity_requests_per_s", "request_throughput_per_s", "output_tokens_per_s")


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure a prediction and a measurement both give: its name, how it reads, where it is in the records."""

    name: str  # "ttft_p50_s", "request_throughput_per_s"
    label: str  # "TTFT p50", "request throughput"
    unit: str  # "s", "req/s", "tokens/s"
    field: str  # the record field: "ttft_s" (a Percentiles) or "request_throughput_per_s" (a number)
    statistic: str | None = None  # the Percentiles statistic ("p50"), None for a number

    def of(self, record: "ServedPrediction | ServedMeasurement") -> float | None:
        v = getattr(record, self.field)
        if self.statistic is not None:
            v = v.get(self.statistic)
        return None if v is None else float(v)


def _metrics() -> dict[str, Metric]:
    out = {"capacity_requests_per_s": Metric("capacity_requests_per_s", "capacity", "req/s", "capacity_requests_per_s"),
           "request_throughput_per_s": Metric("request_throughput_per_s", "request throughput", "req/s", "request_throughput_per_s"),
           "output_tokens_per_s": Metric("output_tokens_per_s", "output tokens/s", "tokens/s", "output_tokens_per_s")}
    for lat in LATENCIES:
        for stat in LATENCY_STATISTICS:
            name = f"{lat[:-2]}_{stat}_s"
            out[name] = Metric(name, f"{lat[:-2].upper()} {stat}", "s", lat, stat)
    return out


METRICS: dict[str, Metric] = _metrics()


def metric(name: str) -> Metric:
    """The metric called `name`; a HarnessError listing the known names otherwise."""
    m = METRICS.get(name)
    if m is None:
        raise HarnessError(f"no served metric {name!r}; known: {', '.join(METRICS)}")
    return m


def _number(v: Any, what: str, *, positive: bool = False, allow_inf: bool = False) -> None:
    """Refuse anything but a real number (NaN refused; inf only with `allow_inf`), naming `what` and the value."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and (allow_inf or math.isfinite(v))
    if not ok or (positive and v <= 0):
        raise HarnessError(f"{what} must be a {'positive ' if positive else ''}number, got {v!r}")


@dataclass(frozen=True, slots=True)
class ServedPoint:
    """Where a served figure was taken: the workload's lengths and the offered load, open loop (an arrival rate) or
    closed loop (a concurrency) — exactly one of the two."""

    input_tokens: float | None  # prompt tokens a request (the mean, for a distribution): ISL; None: not recorded
    output_tokens: float | None  # output tokens a request (the mean): OSL; None: not recorded
    rate_per_s: float | None = None  # open loop: the mean arrival rate; math.inf: every request at once (a burst)
    concurrency: int | None = None  # closed loop: users, each with one request in flight
    workload: str = ""  # which workload: a mix ("512/64"), a trace, a validation row's id
    index: int = 0  # its number among the points of one run

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens"):
            if getattr(self, name) is not None:
                _number(getattr(self, name), f"ServedPoint.{name}", positive=True)
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise HarnessError("a ServedPoint has exactly one of rate_per_s (open loop) and concurrency (closed loop), got "
                               f"rate_per_s={self.rate_per_s!r}, concurrency={self.concurrency!r}")
        if self.rate_per_s is not None:
            _number(self.rate_per_s, "ServedPoint.rate_per_s", positive=True, allow_inf=True)
        c = self.concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise HarnessError(f"ServedPoint.concurrency must be an integer >= 1, got {c!r}")
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise HarnessError(f"ServedPoint.index must be an integer >= 0, got {self.index!r}")

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def burst(self) -> bool:
        """Every request offered at once (a capacity measurement)."""
        return self.rate_per_s is not None and math.isinf(self.rate_per_s)

    @property
    def mix(self) -> str:
        """"512/64": the prompt and output lengths ("?" where not recorded)."""
        return "/".join("?" if x is None else f"{x:g}" for x in (self.input_tokens, self.output_tokens))

    def load_text(self) -> str:
        """The offered load as a reader says it: "0.8 req/s", "all at once", "concurrency 8"."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return "all at once" if self.burst else f"{self.rate_per_s:.3g} req/s"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "served point") -> "ServedPoint":
        return record_from_dict(cls, d, source)


def record_from_dict(cls: Any, d: Any, source: str, **conv: Any) -> Any:
    """`cls(**d)` for a dataclass record read from a stored document: unknown keys dropped, the fields in `conv`
    converted first; a document that is not a mapping, or a missing or bad field, is a HarnessError naming `source`."""
    if not isinstance(d, Mapping):
        raise HarnessError(f"{source}: expected a mapping of fields, got {type(d).__name__}; the file is damaged, rerun it.")
    try:
        return cls(**{k: (conv[k](v) if k in conv else v) for k, v in d.items() if k in cls.__dataclass_fields__})
    except TypeError as exc:
        raise HarnessError(f"{source}: {exc}; the file is damaged, rerun it.") from None


@dataclass(frozen=True, slots=True)
class Interval:
    """An interval of a measured figure: [low, high] at `confidence`, over `n` values, by `method` ("bootstrap over
    requests", "order statistics")."""

    low: float
    high: float
    confidence: float = 0.95
    n: int | None = None
    method: str = ""

    def __post_init__(self) -> None:
        _number(self.low, "Interval.low")
        _number(self.high, "Interval.high")
        if self.low > self.high:
            raise HarnessError(f"Interval.low {self.low!r} is above Interval.high {self.high!r}")
        if not (isinstance(self.confidence, (int, float)) and 0 < self.confidence < 1):
            raise HarnessError(f"Interval.confidence must be in (0, 1), got {self.confidence!r}")

    def contains(self, x: float | None) -> bool | None:
        return None if x is None else bool(self.low <= x <= self.high)

    def half_width(self, around: float | None) -> float | None:
        """The wider side from `around`, as a fraction of it (None when `around` is missing or 0)."""
        if not around:
            return None
        return max(around - self.low, self.high - around) / abs(around)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "interval") -> "Interval":
        return record_from_dict(cls, d, source)


_PCT_FIELDS = {lat: Percentiles.from_dict for lat in LATENCIES}


@dataclass(frozen=True, slots=True)
class ServedPrediction:
    """What a predictor says one point serves; the percentiles it does not give are None. `simulated`: the figures
    come from a model or a simulation, not a measurement (every report says so)."""

    point: ServedPoint
    source: str  # what predicted it and from what ("llama.cpp twin, step times from ...", "aiconfigurator 0.12.0")
    ttft_s: Percentiles = Percentiles()
    tpot_s: Percentiles = Percentiles()
    e2e_s: Percentiles = Percentiles()
    request_throughput_per_s: float | None = None
    output_tokens_per_s: float | None = None
    capacity_requests_per_s: float | None = None  # throughput at saturation for the point's lengths
    simulated: bool = True
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_figures(self, "ServedPrediction")

    def figure(self, name: str) -> float | None:
        return metric(name).of(self)

    def to_dict(self) -> dict[str, Any]:
        return {**_figures_dict(self), "simulated": self.simulated, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "served prediction") -> "ServedPrediction":
        return record_from_dict(cls, d, source, point=lambda p: ServedPoint.from_dict(p, source), notes=tuple, **_PCT_FIELDS)


@dataclass(frozen=True, slots=True)
class ServedMeasurement:
    """What a measurement saw at one point. With `repeats` (the same workload measured again), every figure is the
    median over the repeats that have it and each repeat is kept; `intervals` holds the interval of a figure by metric
    name where one was taken (e.g. the median TTFT's bootstrap interval over the requests)."""

    point: ServedPoint
    source: str  # where it was measured: the load run's folder, a dataset and its row
    ttft_s: Percentiles = Percentiles()
    tpot_s: Percentiles = Percentiles()
    e2e_s: Percentiles = Percentiles()
    request_throughput_per_s: float | None = None
    output_tokens_per_s: float | None = None
    capacity_requests_per_s: float | None = None  # throughput at saturation, where the point measured one
    requests_ok: int = 0
    requests_total: int = 0
    intervals: Mapping[str, Interval] = field(default_factory=dict)
    repeats: tuple["ServedMeasurement", ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_figures(self, "ServedMeasurement")
        for name in ("requests_ok", "requests_total"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise HarnessError(f"ServedMeasurement.{name} must be an integer >= 0, got {v!r}")
        for name, iv in self.intervals.items():
            metric(name)
            if not isinstance(iv, Interval):
                raise HarnessError(f"ServedMeasurement.intervals[{name!r}] must be an Interval, got {iv!r}")
        if any(r.point != self.point for r in self.repeats):
            raise HarnessError("every repeat of a ServedMeasurement must be of its own point")

    def figure(self, name: str) -> float | None:
        return metric(name).of(self)

    def repeat_values(self, name: str) -> tuple[float | None, ...]:
        """Each repeat's figure `name`, in order (empty without repeats)."""
        m = metric(name)
        return tuple(m.of(r) for r in self.repeats)

    @classmethod
    def median_of(cls, repeats: Sequence["ServedMeasurement"], *, source: str | None = None,
                  intervals: Mapping[str, Interval] | None = None, notes: Sequence[str] = ()) -> "ServedMeasurement":
        """The repeats' median: every statistic and rate the median over the repeats that have it, the counts summed,
        each repeat kept (one repeat is returned as it is, with `intervals` and `notes` when given)."""
        reps = tuple(repeats)
        if not reps:
            raise HarnessError("ServedMeasurement.median_of needs at least one measurement")
        if len(reps) == 1:
            r = reps[0]
            return replace(r, intervals=dict(intervals) if intervals is not None else r.intervals, notes=(*r.notes, *notes))

        def med(values: Iterable[Any]) -> float | None:
            v = sorted(float(x) for x in values if x is not None)
            if not v:
                return None
            k = len(v) // 2
            return v[k] if len(v) % 2 else (v[k - 1] + v[k]) / 2

        pct = {lat: Percentiles(sum(getattr(r, lat).count for r in reps),
                                **{s: med(getattr(r, lat).get(s) for r in reps) for s in PERCENTILE_FIELDS[1:]})
               for lat in LATENCIES}
        return cls(reps[0].point, source if source is not None else reps[0].source,
                   **pct, **{k: med(getattr(r, k) for r in reps) for k in RATES},
                   requests_ok=sum(r.requests_ok for r in reps), requests_total=sum(r.requests_total for r in reps),
                   intervals=dict(intervals or {}), repeats=reps, notes=tuple(notes))

    def to_dict(self) -> dict[str, Any]:
        return {**_figures_dict(self), "requests_ok": self.requests_ok, "requests_total": self.requests_total,
                "intervals": {k: v.to_dict() for k, v in self.intervals.items()},
                "repeats": [r.to_dict() for r in self.repeats], "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "served measurement") -> "ServedMeasurement":
        return record_from_dict(cls, d, source, point=lambda p: ServedPoint.from_dict(p, source), notes=tuple,
                      intervals=lambda x: {k: Interval.from_dict(v, source) for k, v in (x or {}).items()},
                      repeats=lambda x: tuple(cls.from_dict(r, source) for r in x or ()), **_PCT_FIELDS)


def _check_figures(r: Any, what: str) -> None:
    if not isinstance(r.point, ServedPoint):
        raise HarnessError(f"{what}.point must be a ServedPoint, got {r.point!r}")
    for lat in LATENCIES:
        if not isinstance(getattr(r, lat), Percentiles):
            raise HarnessError(f"{what}.{lat} must be a Percentiles record, got {getattr(r, lat)!r}")
    for k in RATES:
        v = getattr(r, k)
        if v is not None:
            _number(v, f"{what}.{k}", allow_inf=True)
            if v < 0:
                raise HarnessError(f"{what}.{k} must be >= 0, got {v!r}")


def _figures_dict(r: Any) -> dict[str, Any]:
    return {"point": r.point.to_dict(), "source": r.source, **{lat: getattr(r, lat).to_dict() for lat in LATENCIES},
            **{k: getattr(r, k) for k in RATES}}


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric at one point: predicted against measured, the error (a signed fraction), and the judgement."""

    metric: str
    predicted: float | None
    measured: float | None
    error: float | None  # relative_error(predicted, measured)
    target: float | None = None  # the |error| allowed, a fraction (0.10: ±10 %); None: shown, not judged
    within: bool | None = None  # |error| ≤ target; None: not judged (no target, a figure missing, or excluded: see note)
    note: str = ""
    measured_interval: Interval | None = None  # the measured figure's interval, where one was taken
    repeat_values: tuple[float | None, ...] = ()  # each repeat's measured figure (measured is their median)

    @property
    def judged(self) -> bool:
        return self.within is not None

    @property
    def label(self) -> str:
        return metric(self.metric).label

    @property
    def unit(self) -> str:
        return metric(self.metric).unit

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in ("metric", "predicted", "measured", "error", "target", "within", "note")},
                "measured_interval": None if self.measured_interval is None else self.measured_interval.to_dict(),
                "repeat_values": list(self.repeat_values)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "metric comparison") -> "MetricComparison":
        return record_from_dict(cls, d, source, measured_interval=lambda x: None if x is None else Interval.from_dict(x, source),
                      repeat_values=lambda x: tuple(None if v is None or v != v else float(v) for v in (x if x is not None else ())))


@dataclass(frozen=True, slots=True)
class ServedComparison:
    """A prediction of one point against its measurement: one row per metric (`compare_served` makes it)."""

    point: ServedPoint
    rows: tuple[MetricComparison, ...]
    predicted_by: str  # the prediction's source
    measured_by: str  # the measurement's source
    simulated: bool = True  # the prediction is simulated

    def row(self, name: str) -> MetricComparison | None:
        return next((r for r in self.rows if r.metric == name), None)

    @property
    def judged(self) -> tuple[MetricComparison, ...]:
        return tuple(r for r in self.rows if r.judged)

    @property
    def within(self) -> int:
        """How many judged rows are within target."""
        return sum(1 for r in self.rows if r.within)

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point.to_dict(), "rows": [r.to_dict() for r in self.rows], "predicted_by": self.predicted_by,
                "measured_by": self.measured_by, "simulated": self.simulated}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "served comparison") -> "ServedComparison":
        return record_from_dict(cls, d, source, point=lambda p: ServedPoint.from_dict(p, source),
                      rows=lambda x: tuple(MetricComparison.from_dict(r, source) for r in x or ()))


def within_target(error: float, target: float) -> bool:
    """|error| ≤ target, both fractions; a figure exactly on the target is within it (1.1 against 1.0 at ±10 %, which
    floating point computes as 0.10000000000000009)."""
    return bool(abs(error) <= target * (1 + 1e-9))


def compare_served(prediction: ServedPrediction, measurement: ServedMeasurement, *,
                   targets: Mapping[str, float] | None = None, metrics: Sequence[str] | None = None,
                   not_judged: str = "", not_judged_metrics: Mapping[str, str] | None = None,
                   notes: Mapping[str, str] | None = None) -> ServedComparison:
    """The one comparison of a prediction with a measurement of the same point.

    `metrics`: the rows, in order (default: every metric of METRICS the prediction gives, then any target's);
    `targets`: the |error| allowed by metric, a fraction; a row is judged (`within` set) when it has a target, both
    figures and no reason not to be: `not_judged` excludes the whole point (contended, cut, not held out),
    `not_judged_metrics` one metric; the reason goes into the judged rows' note. `notes` adds a note to a row. The
    measured figure's interval and each repeat's figure come from the measurement."""
    if prediction.point != measurement.point:
        raise HarnessError(f"compare_served: the prediction is of {prediction.point} but the measurement of "
                           f"{measurement.point}; compare a prediction with a measurement of the same point.")
    targets = dict(targets or {})
    for name, t in targets.items():
        metric(name)
        if not (isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < 10):
            raise HarnessError(f"the target of {name} must be a fraction such as 0.10 (±10 %), got {t!r}")
    if metrics is None:
        metrics = [m for m in METRICS if prediction.figure(m) is not None] + [m for m in targets if prediction.figure(m) is None]
    skip, notes = dict(not_judged_metrics or {}), dict(notes or {})
    rows = []
    for name in metrics:
        p, m = prediction.figure(name), measurement.figure(name)
        err, tgt = relative_error(p, m), targets.get(name)
        why = (not_judged or skip.get(name, "")) if tgt is not None else ""
        within = None if (tgt is None or err is None or why) else within_target(err, tgt)
        note = "; ".join(x for x in (why, notes.get(name, "")) if x)
        rows.append(MetricComparison(name, p, m, err, tgt, within, note, measurement.intervals.get(name),
                                     measurement.repeat_values(name)))
    return ServedComparison(prediction.point, tuple(rows), prediction.source, measurement.source, prediction.simulated)


# ---------------------------------------------------------------- the store edge: one flat row per metric

def comparison_rows(comparisons: Iterable[ServedComparison]) -> list[dict[str, Any]]:
    """The comparisons as a table (one row per metric, the point's fields prefixed `point_`), for a stored table."""
    out = []
    for c in comparisons:
        point = {f"point_{k}": v for k, v in c.point.to_dict().items()}
        for r in c.rows:
            iv = r.measured_interval
            out.append({
                **point, "predicted_by": c.predicted_by, "measured_by": c.measured_by, "simulated": c.simulated,
                **{k: getattr(r, k) for k in ("metric", "predicted", "measured", "error", "target", "within", "note")},
                **{f"interval_{k}": (getattr(iv, k) if iv is not None else None) for k in ("low", "high", "confidence", "n", "method")},
                "repeat_values": [None if v is None else float(v) for v in r.repeat_values]})
    return out


def _none_if_nan(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def comparisons_from_rows(rows: Iterable[Mapping[str, Any]], source: str = "served comparison table") -> tuple[ServedComparison, ...]:
    """`comparison_rows` read back (rows of one point together, in order; NaN read as missing, as a table holds it)."""
    out: dict[tuple[Any, ...], tuple[ServedPoint, dict[str, Any], list[MetricComparison]]] = {}
    for i, raw in enumerate(rows):
        where = f"{source} row {i}"
        if not isinstance(raw, Mapping):
            raise HarnessError(f"{where}: expected a mapping of columns, got {type(raw).__name__}")
        d = {k: _none_if_nan(v) for k, v in raw.items() if k != "schema_version"}
        pd_ = {k[len("point_"):]: v for k, v in d.items() if k.startswith("point_")}
        for k in ("concurrency", "index"):  # a table column with missing values holds integers as floats
            if isinstance(pd_.get(k), float) and float(pd_[k]).is_integer():
                pd_[k] = int(pd_[k])
        point = ServedPoint.from_dict(pd_, where)
        iv = None if d.get("interval_low") is None else Interval.from_dict(
            {k: d.get(f"interval_{k}") for k in ("low", "high", "confidence", "n", "method")}, where)
        if iv is not None and iv.n is not None:
            iv = replace(iv, n=int(iv.n))
        reps = d.get("repeat_values")
        row = MetricComparison.from_dict({**d, "measured_interval": None, "repeat_values": [] if reps is None else list(reps)}, where)
        row = replace(row, measured_interval=iv, within=None if row.within is None else bool(row.within))
        key = (point, d.get("predicted_by"), d.get("measured_by"), d.get("simulated"))
        out.setdefault(key, (point, d, []))[2].append(row)
    return tuple(ServedComparison(p, tuple(rs), str(d.get("predicted_by", "")), str(d.get("measured_by", "")),
                                  bool(d.get("simulated", True))) for p, d, rs in out.values())


__all__ = ["LATENCIES", "METRICS", "PERCENTILE_FIELDS", "Interval", "Metric", "MetricComparison",
           "Percentiles", "ServedComparison", "ServedMeasurement", "ServedPoint", "ServedPrediction", "comparison_rows",
           "comparisons_from_rows", "compare_served", "fmt_error_pct", "metric", "record_from_dict", "relative_error",
           "within_target"]
