"""The simulated engine: TTFT = queue + prefill + KV transfer, a link shared by concurrent transfers, startup,
continuous-batching decode. Checked on the engine's scheduled (simulated) emit times, which are exact."""

import asyncio

import pytest

from harness.specs.scenario import load_scenario
from harness.target.clock import SimClock
from harness.target.deployment import deployment_from_scenario
from harness.target.engine import Engine, SimRequest

T_PREFILL_A100 = 0.8563738676512821  # chapter 9, §9.2.3: 0.856 s
T_KV = 1.125 * 2**30 / 25e9 + 5e-6  # §9.2.2, example 9.1: 48.3 ms + 5 µs


class _SubmitClock(SimClock):
    """While `frozen_s` is set, now() is that instant: requests submitted together arrive at one simulated instant,
    so a busy machine preempting this process between two submit calls cannot space them apart (at time_scale
    0.02 a 1 ms preemption is 50 ms simulated); everything after chains in simulated time."""

    frozen_s: float | None = None

    def now_s(self) -> float:
        return self.frozen_s if self.frozen_s is not None else super().now_s()


def _run(scenario_path, requests, *, startup_s=0.0, time_scale=0.02, mode=None, stagger_s=0.0):
    """Submit `requests` ((input_tokens, output_tokens) pairs), return per request the simulated emit times."""
    s = load_scenario(scenario_path)
    dep = deployment_from_scenario(s, startup_s=startup_s, mode=mode)

    async def main():
        clock = _SubmitClock(time_scale)
        emits: dict[str, list[float]] = {}

        async def emit(items, scheduled_ns):
            for r, n in items:
                emits.setdefault(r.request_id, []).extend([(scheduled_ns - clock.t0_ns) / 1e9 / time_scale] * n)

        eng = Engine(dep, clock, emit)
        eng.start()
        reqs = []
        if not stagger_s:
            clock.frozen_s = clock.now_s()
        for i, (n_in, n_out) in enumerate(requests):
            r = SimRequest(f"r{i}", n_in, n_out)
            eng.submit(r)
            reqs.append(r)
            if stagger_s:
                await asyncio.sleep(stagger_s * time_scale)
        clock.frozen_s = None
        await asyncio.wait_for(asyncio.gather(*(r.done for r in reqs)), timeout=60)
        await eng.stop()
        return [(r.arrival_s, emits[r.request_id]) for r in reqs], eng

    return asyncio.run(main())


def test_ttft_is_prefill_plus_transfer(scenario_path):
    [(t0, times)], _ = _run(scenario_path("ch9-hetero-pd"), [(8192, 3)])
    # chapter 9, §9.2.3: "TTFT is 0.86 s of prefill plus the KV transfer"
    assert times[0] - t0 == pytest.approx(T_PREFILL_A100 + T_KV, abs=1e-6)
    assert len(times) == 3 and times[1] > times[0]


def test_concurrent_transfers_share_the_link(scenario_path):
    res, eng = _run(scenario_path("ch9-hetero-pd"), [(8192, 1), (8192, 1)])
    # both prefill on two A100s at once, then both states cross one 25 GB/s link, sharing it (work-conserving):
    # the last state lands 2·V/B after the first transfer starts, and each TTFT lies between the link alone
    # (V/B) and fully shared (2·V/B).
    one = 1.125 * 2**30 / 25e9
    first_arrival = min(t0 for t0, _ in res)
    last_token = max(times[0] for _, times in res)
    assert last_token - first_arrival == pytest.approx(T_PREFILL_A100 + 5e-6 + 2 * one, abs=2e-3)
    for t0, times in res:
        assert T_PREFILL_A100 + one - 2e-3 <= times[0] - t0 <= T_PREFILL_A100 + 5e-6 + 2 * one + 2e-3
    assert eng.link.transfers_total == 2


def test_startup_holds_the_queue(scenario_path):
    [(t0, times)], _ = _run(scenario_path("ch9-hetero-pd"), [(8192, 1)], startup_s=2.0)
    # §9.6.1: nothing is served for T_s after the first request
    assert times[0] - t0 == pytest.approx(2.0 + T_PREFILL_A100 + T_KV, abs=1e-6)


def test_fifo_prefill_queue(scenario_path):
    # five requests, four A100s in P: the fifth waits one whole prefill
    res, _ = _run(scenario_path("ch9-hetero-pd"), [(8192, 1)] * 5)
    ttfts = sorted(times[0] - t0 for t0, times in res)
    assert ttfts[-1] == pytest.approx(2 * T_PREFILL_A100 + T_KV, rel=0.02)


def test_decode_steps_follow_the_model(scenario_path):
    [(t0, times)], eng = _run(scenario_path("ch9-hetero-pd"), [(8192, 5)])
    svc = eng.dep.services["h20-96gb"]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # a lone request decodes at batch 1; each step is the roofline time at its context
    for k, g in enumerate(gaps):
        assert g == pytest.approx(svc.decode_step_s(1, 8192 + k + 1), rel=0.05)


def test_colocated_mode_has_no_transfer(scenario_path):
    [(t0, times)], _ = _run(scenario_path("ch9-hetero-pd"), [(8192, 2)], mode="colocated")
    # the first idle GPU (an A100) takes it: prefill only, no hand-off
    assert times[0] - t0 == pytest.approx(T_PREFILL_A100, abs=1e-6)
