"""A CPU stand-in for torch.cuda, so the GPU timing logic (events, graph capture/replay, flush per call,
warm-up until the clocks settle, the deadline) runs in CI on a simulated device timeline.

The simulated GPU keeps one clock, `now_s`, that only kernels advance. A kernel run eagerly costs its
device time plus `launch_s` (the host cannot launch faster: the gap shows on the device timeline);
inside a graph replay it costs its device time only. A kernel reading data after a flush costs `cold_s`
the first time and `warm_s` after (its inputs are then in L2). Events stamp `now_s`.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest


class FakeGpu:
    def __init__(self, launch_s: float = 0.0):
        self.now_s = 0.0
        self.launch_s = launch_s
        self.capturing: list | None = None
        self.cold = True
        self.flushes = 0

    def kernel(self, device_s: float) -> None:
        if self.capturing is not None:
            self.capturing.append((device_s, device_s))
        else:
            self.now_s += device_s + self.launch_s

    def cached_kernel(self, cold_s: float, warm_s: float) -> None:
        """A kernel whose inputs are cold after a flush and warm on a repeat (in a replay too)."""
        if self.capturing is not None:
            self.capturing.append((cold_s, warm_s))
            return
        self.now_s += (cold_s if self.cold else warm_s) + self.launch_s
        self.cold = False

    def replay(self, ops: list) -> None:
        for cold_s, warm_s in ops:
            self.now_s += cold_s if self.cold else warm_s
            self.cold = False

    def flush(self) -> None:
        self.flushes += 1
        self.now_s += 1e-6
        self.cold = True


class _Event:
    def __init__(self, gpu: FakeGpu, enable_timing: bool = False):
        self.gpu, self.t = gpu, None

    def record(self, stream=None) -> None:
        self.t = self.gpu.now_s

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: "_Event") -> float:
        return (other.t - self.t) * 1e3


class _Graph:
    def __init__(self, gpu: FakeGpu):
        self.gpu, self.ops = gpu, []

    def replay(self) -> None:
        self.gpu.replay(self.ops)


class _Stream:
    def wait_stream(self, other) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _Buf:
    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu

    def zero_(self) -> None:
        self.gpu.flush()


class FakeCuda:
    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu

    def synchronize(self) -> None:
        pass

    def Event(self, enable_timing: bool = False) -> _Event:  # noqa: N802 - torch's name
        return _Event(self.gpu, enable_timing)

    def Stream(self) -> _Stream:  # noqa: N802
        return _Stream()

    def current_stream(self) -> _Stream:
        return _Stream()

    @contextmanager
    def stream(self, s):
        yield

    def CUDAGraph(self) -> _Graph:  # noqa: N802
        return _Graph(self.gpu)

    @contextmanager
    def graph(self, g: _Graph):
        self.gpu.capturing = g.ops
        try:
            yield
        finally:
            self.gpu.capturing = None


class FakeTorch:
    uint8 = "uint8"

    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu
        self.cuda = FakeCuda(gpu)
        self.__version__ = "fake"

    def empty(self, n, dtype=None, device=None) -> _Buf:
        return _Buf(self.gpu)


class RisingClocks:
    """An SM clock that climbs from idle over the first readings, then holds."""

    def __init__(self, mhz=(345, 700, 1200, 1700, 1980)):
        self.seq, self.reads = list(mhz), 0

    def read(self):
        v = self.seq[min(self.reads, len(self.seq) - 1)]
        self.reads += 1
        return v * 1e6, 3.2e9


@pytest.fixture
def fake_gpu():
    return FakeGpu()


@pytest.fixture
def fake_torch(fake_gpu):
    return FakeTorch(fake_gpu)
