"""The server-loop iteration overhead the loop takes from the isolated decode (calibration subset "stages")."""

from dataclasses import dataclass

import pytest

from harness.loop.run import iteration_overhead_s


@dataclass
class _Check:  # the fields of harness.loop.measure.RequestCheck that the estimate reads
    phase: str
    client_decode_s: float | None
    client_chunks: int
    error: str | None = None


class _Steps:
    """A step-time source whose decode step is 10 ms + 5 ms per sequence (context ignored)."""

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        assert context_tokens == pytest.approx(32 + 63 / 2)
        return 0.010 + 0.005 * batch


def _decode(batch: int, step_s: float, chunks: int = 64) -> _Check:
    return _Check(f"decode@{batch}", step_s * (chunks - 1), chunks)


def test_median_over_batches_of_client_step_minus_twin_step():
    # client steps: the twin's step + 2 ms, + 3 ms, + 7 ms -> per batch 2, 3, 7 ms; the median is 3 ms
    checks = [_Check("prefill", None, 0), _decode(1, 0.017), _decode(1, 0.017), _decode(2, 0.023), _decode(4, 0.037)]
    it = iteration_overhead_s(checks, _Steps(), 32, 64)
    assert it is not None
    assert it.value_s == pytest.approx(0.003)
    assert [b for b, _ in it.per_batch_s] == [1, 2, 4]
    assert [x for _, x in it.per_batch_s] == pytest.approx([0.002, 0.003, 0.007])


def test_a_faster_engine_gives_no_negative_overhead():
    it = iteration_overhead_s([_decode(1, 0.012), _decode(2, 0.015)], _Steps(), 32, 64)
    assert it is not None and it.value_s == 0.0
    assert [x for _, x in it.per_batch_s] == pytest.approx([-0.003, -0.005])


def test_failed_or_single_chunk_requests_are_left_out():
    checks = [_Check("decode@1", 1.0, 64, error="timeout"), _Check("decode@2", None, 1), _Check("decode@4", 0.0, 1)]
    assert iteration_overhead_s(checks, _Steps(), 32, 64) is None


def test_prefill_correction_from_the_prompts_that_ran_alone():
    from types import SimpleNamespace

    from harness.loop.run import prefill_correction_s

    class St:
        def prefill_time_s(self, n, cached=0):
            return 0.001 * n

    def c(phase, s, n, error=None):
        return SimpleNamespace(phase=phase, engine_prompt_s=s, engine_prompt_tokens=n, error=error)

    checks = [c("prefill", 0.55, 512), c("prefill", 0.53, 512), c("prefill", 0.60, 512), c("decode@1", 0.05, 32),
              c("decode@1", 0.04, 32), c("decode@1", 0.07, 32),
              c("decode@4", 0.50, 32),  # four prompts together: not a prompt alone
              c("prefill", 9.0, 512, error="timeout"), c("prefill", None, 512)]
    got = prefill_correction_s(checks, St())
    assert [n for n, _ in got] == [32, 512] and [x for _, x in got] == pytest.approx([0.05 - 0.032, 0.55 - 0.512])
    assert prefill_correction_s([c("decode@2", 0.1, 32)], St()) == ()
