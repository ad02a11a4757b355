"""Compare paired runs metric by metric: δ with its bootstrap interval, the rank test, a verdict.

`compare_runs(paths)` loads the runs, pairs them (pairing.py) and, for every metric both runs of
a pair have, estimates δ = B/A − 1 (stats.bootstrap_delta), runs the Mann-Whitney test on the
metric's samples (latency distributions and micro samples; not on per-request rate contributions)
and gives the verdict faster / slower / no significant change. Bootstrap seeds are fixed per
sample family (seed and a CRC of the family's name), so a comparison repeats exactly.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.compare.pairing import Pair, pair_runs
from harness.compare.runs import RunData, load_run_data
from harness.compare.stats import DeltaEstimate, RankTest, bootstrap_deltas, mann_whitney, verdict
from harness.errors import HarnessError


@dataclass(frozen=True)
class CompareOptions:
    n_boot: int = 1000
    seed: int = 0
    confidence: float = 0.95
    min_effect: float = 0.02  # |δ| below this is never a verdict (2 %)
    force: bool = False
    min_tail_samples: int = 10  # p90/p99 need n·(1 − q) samples beyond them on each side, else "not enough data"

    def __post_init__(self) -> None:
        if isinstance(self.n_boot, bool) or not isinstance(self.n_boot, int) or not 100 <= self.n_boot <= 100_000:
            raise HarnessError(f"--bootstrap must be an integer in [100, 100000] resamples, got {self.n_boot!r}.")
        if not (isinstance(self.confidence, float) and 0.5 < self.confidence < 1.0):
            raise HarnessError(f"--confidence must be a fraction in (0.5, 1), e.g. 0.95, got {self.confidence!r}.")
        if isinstance(self.min_tail_samples, bool) or not isinstance(self.min_tail_samples, int) or self.min_tail_samples < 1:
            raise HarnessError(f"min_tail_samples must be an integer >= 1, got {self.min_tail_samples!r}.")
        if not (isinstance(self.min_effect, (int, float)) and math.isfinite(self.min_effect) and 0 <= self.min_effect < 1):
            raise HarnessError(f"--min-effect must be a fraction in [0, 1), e.g. 0.02 for 2 %, got {self.min_effect!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TAIL_QUANTILES = {"p90": 0.90, "p99": 0.99}


def tail_too_thin(statistic: str, n_a: int, n_b: int, min_tail_samples: int) -> str | None:
    """Why a tail percentile of so few samples gets no verdict: the percentile bootstrap of p99 over 200
    requests rests on the 2 largest and is far too narrow (it resamples the same few values)."""
    q = TAIL_QUANTILES.get(statistic)
    if q is None:
        return None
    need = math.ceil(min_tail_samples / (1 - q) - 1e-9)
    if min(n_a, n_b) < need:
        return (f"{statistic} needs >= {need} samples per run ({min_tail_samples} beyond the percentile) for an interval, "
                f"got {min(n_a, n_b)}; run longer or gate on a lower percentile")
    return None


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    family: str
    unit: str
    better: str
    delta: DeltaEstimate
    rank: RankTest | None
    verdict: str
    note: str = ""  # why there is no verdict, when there is none

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "family": self.family, "unit": self.unit, "better": self.better,
                **self.delta.to_dict(), "rank_test": self.rank.to_dict() if self.rank else None,
                "p_value": self.rank.p_value if self.rank else None, "verdict": self.verdict, "note": self.note}


@dataclass(frozen=True)
class PairComparison:
    baseline: RunData
    candidate: RunData
    metrics: tuple[MetricComparison, ...]
    only_in_baseline: tuple[str, ...] = ()
    only_in_candidate: tuple[str, ...] = ()
    forced_reasons: tuple[str, ...] = ()

    def metric(self, name: str) -> MetricComparison | None:
        return next((m for m in self.metrics if m.metric == name), None)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in self.metrics:
            out[m.verdict] = out.get(m.verdict, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline.info(), "candidate": self.candidate.info(),
                "metrics": [m.to_dict() for m in self.metrics], "verdict_counts": self.counts(),
                "only_in_baseline": list(self.only_in_baseline), "only_in_candidate": list(self.only_in_candidate),
                "forced_reasons": list(self.forced_reasons)}


@dataclass(frozen=True)
class Comparison:
    runs: tuple[RunData, ...]
    pairs: tuple[PairComparison, ...]
    options: CompareOptions
    method: str = field(default=(
        "δ = B/A − 1 of each statistic; percentile-bootstrap interval resampling requests (latencies, per-request "
        "contributions to rates) or raw samples (micro) of each run independently; two-sided Mann-Whitney U test "
        "(normal approximation, tie and continuity corrections); verdict when the interval excludes 0 and |δ| >= min_effect"))

    def to_dict(self) -> dict[str, Any]:
        return {"options": self.options.to_dict(), "method": self.method, "runs": [r.info() for r in self.runs],
                "pairs": [p.to_dict() for p in self.pairs]}


def _seed(base: int, name: str) -> int:
    return (base * 1_000_003 + zlib.crc32(name.encode())) % (2**32)


def compare_pair(pair: Pair, o: CompareOptions) -> PairComparison:
    a, b = pair.baseline, pair.candidate
    common = [n for n in a.metrics if n in b.metrics]
    if not common:
        raise HarnessError(f"runs {a.run_id} and {b.run_id} have no metric in common (different microbenchmark cases?); "
                           "compare runs of the same suites and sizes.")
    # metrics sharing samples (p50/p90/p99 of one family, a case's median and rates) share their resamples
    families: dict[str, list[str]] = {}
    for name in common:
        families.setdefault(a.metrics[name].family, []).append(name)
    results: dict[str, MetricComparison] = {}
    for fam, names in families.items():
        ma0, mb0 = a.metrics[names[0]], b.metrics[names[0]]
        ests = bootstrap_deltas(ma0.samples, mb0.samples, [a.metrics[n].spec for n in names], n_boot=o.n_boot,
                                seed=_seed(o.seed, fam), confidence=o.confidence)
        rank = mann_whitney(ma0.samples, mb0.samples) if ma0.rank_testable else None
        for n, est in zip(names, ests):
            ma = a.metrics[n]
            thin = tail_too_thin(ma.spec.statistic, est.n_a, est.n_b, o.min_tail_samples)
            v = "not enough data" if thin else verdict(est, ma.better, o.min_effect)
            results[n] = MetricComparison(n, fam, ma.unit, ma.better, est, rank, v, thin or "")
    out = [results[n] for n in common]
    return PairComparison(a, b, tuple(out), tuple(n for n in a.metrics if n not in b.metrics),
                          tuple(n for n in b.metrics if n not in a.metrics), pair.forced_reasons)


def compare_loaded(runs: list[RunData], options: CompareOptions | None = None) -> Comparison:
    o = options or CompareOptions()
    pairs = pair_runs(runs, force=o.force)
    return Comparison(tuple(runs), tuple(compare_pair(p, o) for p in pairs), o)


def compare_runs(paths: list[str | Path], options: CompareOptions | None = None) -> Comparison:
    """Load the runs at `paths` (baseline first within each workload) and compare them."""
    return compare_loaded([load_run_data(p) for p in paths], options)
