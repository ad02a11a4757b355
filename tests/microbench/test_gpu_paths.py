"""GPU code paths of the timing core and the suites: CUDA events, graph replay, L2 flush (GPU only)."""

import time

import pytest

torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; this machine has none (CPU paths are tested elsewhere)")


@pytest.mark.gpu
@needs_gpu
def test_cuda_events_time_a_known_kernel():
    from microbench.timing import TimingPolicy, time_cuda

    # torch.cuda._sleep spins for a number of cycles: about 1 ms at ~1.5-2 GHz; the core must see it
    m = time_cuda(lambda: torch.cuda._sleep(2_000_000), torch, TimingPolicy(budget_s=0.1, min_reps=10))
    assert m.timer == "cuda-events" and 0.5e-3 < m.stats.median_s < 5e-3


@pytest.mark.gpu
@needs_gpu
def test_tiny_kernels_replayed_from_a_graph():
    from microbench.timing import TimingPolicy, time_cuda

    x = torch.ones(1024, device="cuda")
    m = time_cuda(lambda: x.add_(1), torch, TimingPolicy(budget_s=0.05, target_sample_s=1e-3))
    assert m.timer == "cuda-graph+events" and m.inner_reps > 1 and m.stats.median_s < 50e-6


@pytest.mark.gpu
@needs_gpu
def test_gemm_suite_on_gpu(tmp_path):
    from microbench.runner import run_micro

    s = run_micro("gemm", quick=True, out=tmp_path, device="cuda", budget_s=0.05)
    assert any(c["device"].startswith("cuda") and c["valid"] for c in s.cases)
