"""The loop's two verdicts on the twin's served predictions, and the intervals they are read with.

- `AbsoluteVerdict`: how many judged figures are within their target (capacity ±5 %, TTFT/TPOT p50 ±10 %), on
  held-out, uncontended points. It needs a host that repeats itself within the targets.
- `RepeatabilityVerdict`: whether the twin's errors are no wider than the engine's own repeat-to-repeat differences,
  over the judged figures measured at least twice back to back. The test: with e_f = |twin error| of figure f against
  the median m_f of its n repeats, and d_f = the median over the pairs of repeats of |r_i − r_j| / m_f × √((1 + 1/n) / 2)
  — what one more independent repeat would be expected to miss m_f by (a pair's difference has variance 2σ², a new
  repeat against the mean of n has σ²(1 + 1/n)) —, the ratio R = median_f e_f / median_g d_g, e over every
  judged figure, d over those measured at least twice (the time budget may repeat only some points; the engine's
  repeatability is then read on those). The twin **matches the engine** when R ≤ 1; the 95 % interval on R is a
  percentile bootstrap, the judged figures and the repeated ones each resampled with replacement.
- `bootstrap_median_interval`: the measured median's 95 % interval, a percentile bootstrap over the requests (each
  repeat's requests resampled, then the median of the repeats' medians, as the measured figure is taken).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from harness.served import record_from_dict
from harness.served import Interval, ServedComparison, fmt_error_pct

CONFIDENCE = 0.95
N_BOOT = 2000
MIN_INTERVAL_REQUESTS = 6  # fewer requests pin no median: the interval is left out


@dataclass(frozen=True)
class AbsoluteVerdict:
    """N of M judged figures within target (held-out, uncontended points); `failures` says which missed and by how much."""

    judged: int
    within: int
    contended_points: int
    points: int
    failures: tuple[str, ...] = ()

    @property
    def all_within(self) -> bool:
        return self.judged > 0 and self.within == self.judged

    def text(self) -> str:
        if not self.judged:
            return ("NO VERDICT: no figure could be judged (every point contended, cut at its drain limit, not held out or "
                    "without a completed request: see the notes), so this run says nothing about the targets")
        return f"{self.within} of {self.judged} judged figures within target"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"all_within": self.all_within}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "verdict") -> "AbsoluteVerdict":
        return record_from_dict(cls, d, source, failures=tuple)

    @classmethod
    def of(cls, comparisons: Sequence[ServedComparison], contended_points: int = 0) -> "AbsoluteVerdict":
        judged = [(c, r) for c in comparisons for r in c.rows if r.judged]
        fails = tuple(f"{c.point.mix} @ {c.point.load_text()}: {r.metric} {fmt_error_pct(r.error)} (target ±{r.target:.0%})"
                      for c, r in judged if not r.within)
        return cls(len(judged), sum(1 for _, r in judged if r.within), contended_points, len(comparisons), fails)


def _repeats(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def repeat_difference(values: Sequence[float | None]) -> float | None:
    """d_f for one figure's repeats (the module's test): the median pairwise |r_i − r_j| over the repeats' median, ×
    √((1 + 1/n) / 2): what one more independent repeat is expected to miss the median of n by. None below 2 repeats."""
    v = _repeats(values)
    if len(v) < 2:
        return None
    m = statistics.median(v)
    pairs = [abs(a - b) / m for i, a in enumerate(v) for b in v[i + 1:]]
    return statistics.median(pairs) * math.sqrt((1 + 1 / len(v)) / 2)


@dataclass(frozen=True)
class RepeatabilityVerdict:
    """The twin against the engine's own repeatability over the judged figures measured at least twice (the module's
    test). `pairs_within`: the share of ordered pairs of repeats where one taken as the prediction of the other is within
    target (how often this host reproduces a figure to the targets' tolerance)."""

    figures: int  # judged figures with a twin error (e_f)
    repeats: int  # the fewest repeats of any repeated figure
    twin_error: float  # median |twin error| over the judged figures, a fraction
    repeat_error: float  # median d_f over the repeated figures, a fraction
    ratio: float  # twin_error / repeat_error (inf when the repeats agree exactly and the twin does not)
    ratio_low: float
    ratio_high: float
    within: int  # of them, the twin within target
    pairs_within: float
    confidence: float = CONFIDENCE
    n_boot: int = N_BOOT
    repeated_figures: int = 0  # judged figures measured at least twice (d_f); 0 in records before it was kept: all of them

    @property
    def matches(self) -> bool:
        return self.ratio <= 1.0

    def text(self) -> str:
        head = ("the twin MATCHES the engine" if self.matches else "the twin does NOT match the engine")
        sure = ("" if (self.ratio_high <= 1.0 or self.ratio_low > 1.0) else
                "; the interval includes 1: more figures or repeats would be needed to tell")
        return (f"{head}: median |twin error| {self.twin_error:.1%} against the {self.repeat_error:.1%} one more repeat of the "
                f"engine would be expected to miss by, ratio {self.ratio:.2f} ({self.confidence:.0%} interval "
                f"{self.ratio_low:.2f}–{self.ratio_high:.2f}, bootstrap over {self.figures} judged figures, "
                f"{self.repeated_figures or self.figures} of them measured {self.repeats}+ times){sure}; one repeat within "
                f"target of another for {self.pairs_within:.0%} of the pairs")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"matches": self.matches}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "repeatability verdict") -> "RepeatabilityVerdict":
        return record_from_dict(cls, d, source)

    @classmethod
    def of(cls, comparisons: Sequence[ServedComparison], *, n_boot: int = N_BOOT, seed: int = 0,
           confidence: float = CONFIDENCE) -> "RepeatabilityVerdict | None":
        """None when no judged figure was measured twice."""
        judged = [r for c in comparisons for r in c.rows if r.judged and r.error is not None]
        rows = [r for r in judged if len(_repeats(r.repeat_values)) >= 2]
        if not rows:
            return None
        e = np.array([abs(r.error) for r in judged])  # type: ignore[arg-type]
        d = np.array([repeat_difference(r.repeat_values) for r in rows], dtype=float)
        ratio = _ratio(float(np.median(e)), float(np.median(d)))
        rng = np.random.default_rng(seed)
        ie = rng.integers(0, len(e), size=(n_boot, len(e)))
        idx = rng.integers(0, len(d), size=(n_boot, len(d)))
        boot = np.array([_ratio(a, b) for a, b in zip(np.median(e[ie], axis=1), np.median(d[idx], axis=1))])  # may hold inf: no interpolation
        lo, hi = (float(x) for x in np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2], method="inverted_cdf"))
        pairs = [(a, b, r.target) for r in rows for v in [_repeats(r.repeat_values)]
                 for i, a in enumerate(v) for j, b in enumerate(v) if i != j]
        share = sum(1 for a, b, t in pairs if abs(a / b - 1) <= t * (1 + 1e-9)) / len(pairs)
        return cls(len(judged), min(len(_repeats(r.repeat_values)) for r in rows), float(np.median(e)), float(np.median(d)),
                   ratio, lo, hi, sum(1 for r in judged if r.within), share, confidence, n_boot, len(rows))


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 0.0 if a == 0 else math.inf


def bootstrap_median_interval(samples: Sequence[Sequence[float]], *, confidence: float = CONFIDENCE, n_boot: int = N_BOOT,
                              seed: int = 0) -> Interval | None:
    """The percentile bootstrap interval of the median of the repeats' medians, each repeat's requests (`samples`, one
    sequence per repeat; NaN dropped) resampled with replacement. None under MIN_INTERVAL_REQUESTS requests in all or
    a repeat with fewer than 2."""
    xs = [np.asarray([v for v in s if v is not None and math.isfinite(v)], dtype=float) for s in samples]
    if not xs or any(x.size < 2 for x in xs) or sum(x.size for x in xs) < MIN_INTERVAL_REQUESTS:
        return None
    rng = np.random.default_rng(seed)
    meds = np.column_stack([np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1) for x in xs])
    stat = np.median(meds, axis=1)
    lo, hi = (float(v) for v in np.quantile(stat, [(1 - confidence) / 2, (1 + confidence) / 2]))
    what = "each repeat resampled, the median of their medians" if len(xs) > 1 else "resampled"
    return Interval(lo, hi, confidence, int(sum(x.size for x in xs)), f"bootstrap over requests ({what}; {n_boot} resamples)")


__all__ = ["CONFIDENCE", "AbsoluteVerdict", "RepeatabilityVerdict", "bootstrap_median_interval", "repeat_difference"]
