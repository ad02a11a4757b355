"""Statistics of a comparison: bootstrap interval of a relative delta, the Mann-Whitney rank test, verdicts, and the
distribution-free interval of one sample's median.

Relative delta of a statistic θ (p50, p99, mean, sum, median ...) of run B against baseline A:

    δ = θ(B) / θ(A) − 1

Its interval is the percentile bootstrap (Efron & Tibshirani, ch. 13): A and B are resampled
independently with replacement `n_boot` times from a generator seeded with `seed`, δ is recomputed
on each pair of resamples, and the (1−c)/2 and (1+c)/2 quantiles bound it. The rank test is the
two-sided Mann-Whitney U test with the normal approximation, tie correction and continuity
correction (Mann & Whitney 1947; the same approximation SciPy's `mannwhitneyu(method="asymptotic")`
uses), implemented here with numpy so the harness needs no SciPy.

A change is significant when the interval excludes 0 and |δ| is at least `min_effect` (a floor
below which a change is not worth a verdict, as asv's --factor). Samples of one load run are not
independent (requests share queues), so the interval is an approximation; per-request resampling
is the convention of the load-testing tools (guidellm, AIPerf) and is stated in every report.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal

import numpy as np

from harness.errors import HarnessError

Better = Literal["lower", "higher"]
Verdict = Literal["faster", "slower", "no significant change", "not enough data"]

# statistic name -> function over axis=-1 of a 2-D array of resamples
STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "p50": lambda x: np.percentile(x, 50, axis=-1),
    "p90": lambda x: np.percentile(x, 90, axis=-1),
    "p99": lambda x: np.percentile(x, 99, axis=-1),
    "median": lambda x: np.median(x, axis=-1),
    "mean": lambda x: np.mean(x, axis=-1),
    "sum": lambda x: np.sum(x, axis=-1),
}

# the bootstrap works on blocks of resamples so memory stays bounded for pooled ITL gaps
_BLOCK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class MetricSpec:
    """How one metric's value follows from its samples: value = scale · θ(x), or scale / θ(x) when reciprocal."""

    statistic: str
    scale: float = 1.0
    reciprocal: bool = False

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise HarnessError(f"statistic {self.statistic!r} is unknown; known: {', '.join(STATISTICS)}.")

    def value(self, theta: np.ndarray | float) -> np.ndarray | float:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.scale / theta if self.reciprocal else self.scale * theta


@dataclass(frozen=True)
class DeltaEstimate:
    """θ of A and B (in the metric's unit), δ = B/A − 1 and its bootstrap interval (fractions)."""

    a_value: float
    b_value: float
    delta_rel: float
    ci_low_rel: float
    ci_high_rel: float
    confidence: float
    n_a: int
    n_b: int
    n_boot: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _resampled_values(x: np.ndarray, specs: list[MetricSpec], n_boot: int, rng: np.random.Generator) -> list[np.ndarray]:
    """value(resample) for each spec, all specs evaluated on the same resamples (one gather per block)."""
    n = x.size
    block = max(1, min(n_boot, _BLOCK_ELEMENTS // max(n, 1)))
    outs = [np.empty(n_boot) for _ in specs]
    for start in range(0, n_boot, block):
        k = min(block, n_boot - start)
        xs = x[rng.integers(0, n, size=(k, n))]
        for out, spec in zip(outs, specs):
            out[start:start + k] = STATISTICS[spec.statistic](xs)
    return [np.asarray(spec.value(out), dtype=float) for out, spec in zip(outs, specs)]


@dataclass(frozen=True)
class MedianInterval:
    """A distribution-free interval of a population median from one sample: [x_(j), x_(n+1−j)], the j-th smallest and
    the j-th largest value, with the largest j whose coverage P(j ≤ K ≤ n − j), K ~ Binomial(n, ½), is at least the
    confidence asked (Conover, Practical Nonparametric Statistics, §3.2). Exact for any continuous distribution of
    independent draws; the requests of one load run share queues, so for them it is an approximation, as the bootstrap
    above."""

    low: float
    high: float
    coverage: float  # the interval's exact coverage (at least the confidence asked)
    rank: int  # j: the interval runs from the j-th smallest to the j-th largest value
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def median_interval(values: Any, confidence: float = 0.95) -> MedianInterval | None:
    """The order-statistic interval of the median of `values` (NaN dropped); None when the sample is too small for any
    interval to reach `confidence` (below 6 values at 0.95: even [min, max] covers only 1 − 2 / 2ⁿ)."""
    if not (0.5 < confidence < 1.0):
        raise HarnessError(f"the median interval's confidence must be in (0.5, 1), e.g. 0.95, got {confidence!r}.")
    x = np.sort(np.asarray(values, dtype=float).ravel())
    x = x[np.isfinite(x)]
    n = int(x.size)
    best = None
    below = 0.5 ** n  # P(K ≤ j − 1), at j = 1
    for j in range(1, n // 2 + 1):
        cover = 1.0 - 2.0 * below
        if cover < confidence:
            break
        best = (j, cover)
        below += math.comb(n, j) * 0.5 ** n
    if best is None:
        return None
    j, cover = best
    return MedianInterval(float(x[j - 1]), float(x[n - j]), cover, j, n)


def _check(n_boot: int, confidence: float) -> None:
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 100:
        raise HarnessError(f"--bootstrap must be an integer >= 100 resamples, got {n_boot!r}.")
    if not (0.5 < confidence < 1.0):
        raise HarnessError(f"--confidence must be in (0.5, 1), e.g. 0.95, got {confidence!r}.")


def bootstrap_deltas(a: Any, b: Any, specs: list[MetricSpec], *, n_boot: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> list[DeltaEstimate]:
    """δ = value(B)/value(A) − 1 for several statistics of the same samples, from shared resamples."""
    _check(n_boot, confidence)
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    nan = float("nan")
    na, nb = int(xa.size), int(xb.size)
    if na == 0 or nb == 0:
        return [DeltaEstimate(nan, nan, nan, nan, nan, confidence, na, nb, n_boot, seed) for _ in specs]
    rng = np.random.default_rng(seed)
    tas = _resampled_values(xa, specs, n_boot, rng)
    tbs = _resampled_values(xb, specs, n_boot, rng)
    out = []
    for spec, ta, tb in zip(specs, tas, tbs):
        stat = STATISTICS[spec.statistic]
        va = float(spec.value(float(stat(xa[None, :])[0])))
        vb = float(spec.value(float(stat(xb[None, :])[0])))
        with np.errstate(divide="ignore", invalid="ignore"):
            d = tb / ta - 1.0
            delta = vb / va - 1.0 if va != 0 else nan
        d = d[np.isfinite(d)]
        if d.size < n_boot // 2 or not math.isfinite(delta):
            out.append(DeltaEstimate(va, vb, delta, nan, nan, confidence, na, nb, n_boot, seed))
            continue
        lo, hi = np.quantile(d, [(1 - confidence) / 2, (1 + confidence) / 2])
        out.append(DeltaEstimate(va, vb, float(delta), float(lo), float(hi), confidence, na, nb, n_boot, seed))
    return out


def bootstrap_delta(a: Any, b: Any, spec: MetricSpec, *, n_boot: int = 1000, seed: int = 0,
                    confidence: float = 0.95) -> DeltaEstimate:
    """δ = value(B)/value(A) − 1 with a percentile-bootstrap interval; NaN where a side has no samples."""
    return bootstrap_deltas(a, b, [spec], n_boot=n_boot, seed=seed, confidence=confidence)[0]


@dataclass(frozen=True)
class RankTest:
    """Two-sided Mann-Whitney U test of A against B.

    u_b counts pairs (a, b) with b > a (ties count ½); prob_b_greater = u_b / (n_a·n_b) is the
    common-language effect size P(B > A) + ½P(B = A): 0.5 means no shift.
    """

    u_a: float
    u_b: float
    z: float
    p_value: float
    prob_b_greater: float
    n_a: int
    n_b: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def average_ranks(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Ranks 1..n with ties given their average rank, and the tie term Σ(t³ − t) over tie groups."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    avg = ends - (counts - 1) / 2.0
    return avg[inverse], float(np.sum(counts.astype(float) ** 3 - counts))


def mann_whitney(a: Any, b: Any) -> RankTest | None:
    """U_A = R_A − n_A(n_A+1)/2 (R_A: rank sum of A in the pooled sample); U_B = n_A·n_B − U_A.

    z = (|U_A − n_A n_B / 2| − ½) / σ,  σ² = n_A n_B / 12 · ((n+1) − Σ(t³−t) / (n(n−1))),  p = erfc(z/√2).
    None when a side has no finite sample.
    """
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    na, nb = int(xa.size), int(xb.size)
    if na == 0 or nb == 0:
        return None
    ranks, ties = average_ranks(np.concatenate([xa, xb]))
    n = na + nb
    u_a = float(ranks[:na].sum() - na * (na + 1) / 2.0)
    u_b = na * nb - u_a
    mu = na * nb / 2.0
    var = na * nb / 12.0 * ((n + 1) - (ties / (n * (n - 1)) if n > 1 else 0.0))
    if var <= 0:
        z, p = 0.0, 1.0
    else:
        z = max(abs(u_a - mu) - 0.5, 0.0) / math.sqrt(var)
        p = math.erfc(z / math.sqrt(2.0))
    return RankTest(u_a, u_b, z, min(1.0, p), u_b / (na * nb), na, nb)


def verdict(est: DeltaEstimate, better: Better, min_effect: float = 0.0) -> Verdict:
    """faster / slower when the interval excludes 0 and |δ| >= min_effect; "faster" means better for the user
    (lower latency, higher throughput)."""
    if not all(math.isfinite(v) for v in (est.delta_rel, est.ci_low_rel, est.ci_high_rel)):
        return "not enough data"
    if est.ci_low_rel <= 0.0 <= est.ci_high_rel or abs(est.delta_rel) < min_effect:
        return "no significant change"
    went_up = est.ci_low_rel > 0.0
    return "slower" if went_up == (better == "lower") else "faster"
