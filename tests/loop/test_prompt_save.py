"""The host-RAM prompt-cache copy the loop takes from its isolated requests (calibration subset "stages")."""

import pytest

from harness.loop.measure import RequestCheck
from harness.loop.run import prompt_save


def _c(phase: str, rep: int, over_s: float | None, error: str | None = None) -> RequestCheck:
    return RequestCheck(phase=phase, rep=rep, client_ttft_s=0.05, engine_prompt_s=0.04, ttft_minus_engine_prompt_s=over_s,
                        engine_prompt_tokens=16, usage_prompt_tokens=16, client_chunks=1, usage_completion_tokens=1,
                        engine_predicted_tokens=1, chunks_minus_usage=0, engine_decode_s=None, client_decode_s=None,
                        e2e_s=0.05, error=error)


def _case(p: int, o: int, rep: int, copy_s: float, base_s: float = 0.002, slots: int = 4) -> list[RequestCheck]:
    # one of the `slots` small requests after the case pays the copy; every one pays the baseline
    return [_c(f"save@{p}/{o}", rep, base_s + (copy_s if i == 1 else 0.0)) for i in range(slots)]


def test_recovers_known_per_token_costs_and_the_baseline():
    per_p, per_g = 120e-6, 40e-6
    checks = [_c("savewarm", i, 0.3) for i in range(4)] + [_c("savebase", i, x) for i, x in enumerate((0.002, 0.0021, 0.0019, 0.002))]
    for p, o in ((512, 64), (128, 256), (512, 33)):
        for rep in range(2):
            checks += _case(p, o, rep, per_p * p + per_g * (o - 1))
    checks.append(_c("save@512/64", 0, None, error="reset"))  # a failed request is left out
    ps = prompt_save(checks)
    assert ps is not None
    assert ps.baseline_s == pytest.approx(0.002)  # the warm-up requests (0.3 s) are not the baseline
    assert ps.per_prompt_s == pytest.approx(per_p, rel=1e-6) and ps.per_generated_s == pytest.approx(per_g, rel=1e-6)
    assert [k[:2] for k in ps.knots] == [(128, 255), (512, 32), (512, 63)]
    assert ps.predicted_s(512, 63) == pytest.approx(per_p * 512 + per_g * 63)


def test_median_over_reps_and_costs_never_negative():
    checks = [_c("savebase", 0, 0.002)]
    checks += _case(512, 64, 0, 0.060) + _case(512, 64, 1, 0.070) + _case(512, 64, 2, 0.300)  # one rep disturbed
    checks += _case(128, 256, 0, 0.0) + _case(128, 256, 1, 0.0)  # no copy seen: a fit without generated cost
    ps = prompt_save(checks)
    assert ps.knots[1] == (512, 63, pytest.approx(0.070))
    assert ps.per_prompt_s >= 0 and ps.per_generated_s >= 0


def test_nothing_measured_is_none():
    assert prompt_save([]) is None
    assert prompt_save([_c("savebase", 0, 0.002)]) is None
    assert prompt_save(_case(512, 64, 0, 0.06)) is None  # no baseline
