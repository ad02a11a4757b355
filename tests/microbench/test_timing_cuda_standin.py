"""time_cuda and the graph-step path on a simulated device timeline (tests/microbench/conftest.py): the GPU
logic that cannot run on CI's CPUs — flush per call, graph replay, launch overhead, warm-up until the SM
clock settles, the deadline — checked against known simulated durations."""

import time

import pytest

from microbench.backends import Backend
from microbench.graph_step import time_step
from microbench.timing import TimingPolicy, clocks_settled, time_cuda, warmup_done

from conftest import RisingClocks  # noqa: E402 - the stand-in lives beside the tests

FAST = TimingPolicy(budget_s=0.02, warmup_s=0.0, gpu_min_warmup_s=0.0, max_warmup_s=1.0, min_reps=5, max_reps=50,
                    target_sample_s=1e-3)


def test_flush_makes_every_sample_one_cold_call(fake_gpu, fake_torch):
    fn = lambda: fake_gpu.cached_kernel(100e-6, 10e-6)  # noqa: E731
    m = time_cuda(fn, fake_torch, FAST, flush=fake_torch.empty(1).zero_)
    assert m.inner_reps == 1 and m.stats.median_s == pytest.approx(100e-6, rel=0.02)
    assert fake_gpu.flushes >= m.stats.n
    assert any("flush before every timed call" in n for n in m.notes)


def test_without_flush_repeats_are_warm_and_tiny_calls_replay_from_a_graph(fake_gpu, fake_torch):
    fn = lambda: fake_gpu.cached_kernel(100e-6, 10e-6)  # noqa: E731
    m = time_cuda(fn, fake_torch, FAST)
    assert m.timer == "cuda-graph+events" and m.inner_reps > 1
    assert m.stats.median_s == pytest.approx(10e-6, rel=0.02)  # the cache figure a flush exists to avoid


def _backend(torch):
    return Backend("torch", "cuda:0", torch, None, "stand-in", None, 50e6, "L2")


def test_graph_step_reports_replay_and_launch_overhead():
    from conftest import FakeGpu, FakeTorch

    gpu = FakeGpu(launch_s=0.5e-3)
    torch = FakeTorch(gpu)
    st = time_step(_backend(torch), lambda: gpu.kernel(1e-3), FAST)
    assert st.mode == "cuda-graph-replay"
    assert st.primary is st.graph and st.graph.stats.median_s == pytest.approx(1e-3, rel=0.02)
    assert st.eager.stats.median_s == pytest.approx(1.5e-3, rel=0.02)
    assert st.launch_overhead_s == pytest.approx(0.5e-3, rel=0.05)
    p = st.params()
    assert p["timed"] == "cuda-graph-replay" and p["eager_step_s"] > p["graph_step_s"]


def test_graph_step_falls_back_to_eager_with_the_reason(fake_gpu, fake_torch):
    def refuse(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    st = time_step(_backend(fake_torch), lambda: fake_gpu.kernel(1e-3), FAST, capture=refuse)
    assert st.mode == "eager" and st.graph is None and st.launch_overhead_s is None
    assert "capture failed" in st.notes[0] and "not permitted" in st.notes[0]


def test_cpu_step_is_eager_and_says_so():
    from harness.specs.host import detect_host
    from microbench.backends import detect_backends

    b = next(x for x in detect_backends(detect_host(), "cpu").backends if x.name == "torch")
    st = time_step(b, lambda: sum(range(100)), FAST)
    assert st.mode == "eager" and st.params()["graph_step_s"] is None


def test_warmup_waits_for_the_sm_clock_to_settle(fake_gpu, fake_torch):
    clocks = RisingClocks()
    m = time_cuda(lambda: fake_gpu.kernel(1e-3), fake_torch, FAST, clocks=clocks)
    assert clocks.reads >= 7  # 5 rising readings, then three equal ones at 1980 MHz
    assert m.sm_clock_hz == pytest.approx(1980e6) and m.mem_clock_hz == pytest.approx(3.2e9)
    assert m.warmup_s is not None and m.warmup_s >= 0.1  # readings are 20 ms apart


def test_warmup_rules():
    pol = TimingPolicy(warmup_s=0.0, gpu_min_warmup_s=0.3, max_warmup_s=2.0)
    assert warmup_done(0.1, 10, [1980e6] * 5, pol, gpu=True, clocks_readable=True) == (False, None)  # before the minimum
    assert warmup_done(0.5, 10, [345e6, 900e6, 1500e6], pol, gpu=True, clocks_readable=True) == (False, None)  # still rising
    assert warmup_done(0.5, 10, [1970e6, 1980e6, 1975e6], pol, gpu=True, clocks_readable=True) == (True, None)
    assert warmup_done(0.5, 10, [], pol, gpu=True, clocks_readable=False) == (True, None)  # no NVML: the minimum time only
    done, why = warmup_done(2.1, 10, [345e6, 600e6, 900e6], pol, gpu=True, clocks_readable=True)
    assert done and "not settled" in why
    assert not clocks_settled([1980e6, 1980e6], 0.03)  # fewer than three readings
    assert not clocks_settled([1980e6, 1500e6, 1500e6, 1500e6], 0.03)  # settled, but below the peak seen: throttling


def test_deadline_stops_sampling(fake_gpu, fake_torch):
    def slow():
        time.sleep(0.01)
        fake_gpu.kernel(1e-3)

    pol = TimingPolicy(budget_s=5.0, warmup_s=0.0, gpu_min_warmup_s=0.0, max_warmup_s=1.0, min_reps=3, max_reps=500)
    t0 = time.perf_counter()
    m = time_cuda(slow, fake_torch, pol, deadline_s=0.3)
    assert time.perf_counter() - t0 < 3.0
    assert m.stats.n >= 3 and any("deadline" in n for n in m.notes)


def test_policy_validates_the_warmup_cap():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="max_warmup_s"):
        TimingPolicy(gpu_min_warmup_s=2.0, max_warmup_s=1.0)
