"""The repeatability verdict (harness.loop_records.verdict): the twin's |error| over every judged figure against the
engine's repeat-to-repeat difference over the figures measured at least twice, with a bootstrap interval on the ratio."""

from __future__ import annotations

import math

import pytest

from harness.loop_records.verdict import RepeatabilityVerdict, repeat_difference
from harness.served import Percentiles, ServedMeasurement, ServedPoint, ServedPrediction, compare_served

TARGETS = {"ttft_p50_s": 0.10, "tpot_p50_s": 0.10}


def _comparison(i: int, predicted: float, measured: tuple[float, ...]):
    pt = ServedPoint(512, 64, rate_per_s=0.1 * (i + 1), workload="512/64", index=i)
    pred = ServedPrediction(pt, "twin (test)", ttft_s=Percentiles(10, p50=predicted), tpot_s=Percentiles(10, p50=0.05))
    reps = [ServedMeasurement(pt, f"run{i}-{k}", ttft_s=Percentiles(10, p50=m), tpot_s=Percentiles(10, p50=0.05))
            for k, m in enumerate(measured)]
    return compare_served(pred, ServedMeasurement.median_of(reps), targets=TARGETS, metrics=["ttft_p50_s"])


def test_repeat_difference_is_the_expected_miss_of_one_more_repeat():
    assert repeat_difference([1.0]) is None and repeat_difference([1.0, None]) is None
    # two repeats 0.9 and 1.1: |diff| / median = 0.2, times sqrt((1 + 1/2) / 2)
    assert repeat_difference([0.9, 1.1]) == pytest.approx(0.2 * math.sqrt(0.75))


def test_twin_error_reads_every_judged_figure_and_the_repeat_difference_only_the_repeated_ones():
    """The time budget may repeat only some points: the twin is still judged on all of them."""
    comps = [_comparison(0, 1.00, (0.90, 1.10)),  # repeated: |e| 0, d = 0.173
             _comparison(1, 1.30, (1.00,)),  # once: |e| 0.30
             _comparison(2, 1.30, (1.00,))]  # once: |e| 0.30
    v = RepeatabilityVerdict.of(comps)
    assert v is not None and v.figures == 3 and v.repeated_figures == 1 and v.repeats == 2
    assert v.twin_error == pytest.approx(0.30) and v.repeat_error == pytest.approx(0.2 * math.sqrt(0.75))
    assert v.ratio == pytest.approx(0.30 / v.repeat_error) and not v.matches
    assert v.ratio_low <= v.ratio <= v.ratio_high
    assert "3 judged figures, 1 of them measured 2+ times" in v.text()


def test_a_twin_inside_the_engine_noise_matches_and_none_without_repeats():
    comps = [_comparison(i, 1.0 + 0.01 * i, (0.8, 1.2)) for i in range(6)]
    v = RepeatabilityVerdict.of(comps)
    assert v is not None and v.matches and v.figures == v.repeated_figures == 6 and "MATCHES" in v.text()
    assert RepeatabilityVerdict.of([_comparison(0, 1.0, (1.0,))]) is None


def test_records_written_before_repeated_figures_was_kept_still_read():
    v = RepeatabilityVerdict.of([_comparison(i, 1.0, (0.9, 1.1)) for i in range(3)])
    d = v.to_dict()
    d.pop("repeated_figures")
    old = RepeatabilityVerdict.from_dict(d)
    assert old.repeated_figures == 0 and "3 judged figures, 3 of them" in old.text()
