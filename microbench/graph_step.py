"""Time a whole forward step the way an engine runs it: captured once into a CUDA graph, replayed.

A Qwen3-8B decode step is ~1,500 kernel launches; launched eagerly from Python the host cannot
keep up, and the step time measures launch overhead, not the GPU (MBU at batch 1 reads ~40 %
instead of ~80 %, and rises with batch for the wrong reason). Engines (vLLM, SGLang, TensorRT-LLM)
replay decode steps from CUDA graphs. So a step here is timed twice:

- eager: plain launches, the same static inputs (no host→device copy inside the step);
- graph: the step captured once (side-stream warm-up, then `torch.cuda.graph`) and replayed.

The case reports the graph replay; the eager time and `launch_overhead_s = eager − graph` are
recorded beside it. On the CPU there is nothing to capture: the case reports the eager time and
says so. A capture that fails falls back to eager, with the reason in the notes.

The step must read only tensors allocated before capture (static inputs): `fn` may not create a
host tensor and copy it to the device, or draw random numbers with a fresh host seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from microbench.timing import Measurement, TimingPolicy, capture_graph


@dataclass(frozen=True)
class StepTiming:
    primary: Measurement  # what the case reports
    eager: Measurement
    graph: Measurement | None
    mode: str  # "cuda-graph-replay" | "eager"
    notes: tuple[str, ...]

    @property
    def launch_overhead_s(self) -> float | None:
        if self.graph is None:
            return None
        return self.eager.stats.median_s - self.graph.stats.median_s

    @property
    def graph_mode(self) -> str:
        """"graph" when the reported time is a graph replay, else "eager" (the decode params' `mode`)."""
        return "graph" if self.graph is not None else "eager"

    def params(self) -> dict[str, Any]:
        """What a case records about how its step was timed."""
        return {
            "timed": self.mode,
            "eager_step_s": self.eager.stats.median_s,
            "graph_step_s": self.graph.stats.median_s if self.graph is not None else None,
            "launch_overhead_s": self.launch_overhead_s,
        }


def time_step(b: Any, fn: Callable[[], Any], policy: TimingPolicy, *, capture: Callable[[Callable[[], Any]], Any] | None = None,
              l2: str = "flush", eager: bool = True) -> StepTiming:
    """Time `fn` eagerly and (on CUDA, or with a given `capture`) as a replayed graph.

    `capture(fn)` returns an object with `replay()`; default: microbench.timing.capture_graph (one call
    per graph). Tests pass a CPU stand-in. `eager=False` skips the eager timing where a graph exists."""
    if not b.is_cuda and capture is None:
        m = b.time(fn, policy, allow_graph=False, l2=l2)
        return StepTiming(m, m, None, "eager", ())  # params say timed="eager": no CUDA graph on the CPU
    cap = capture or (lambda f: capture_graph(b.module, f, 1))
    eager_m = b.time(fn, policy, allow_graph=False, l2=l2) if eager else None
    try:
        g = cap(fn)
        g.replay()
        b.sync()
    except Exception as exc:  # noqa: BLE001 - an op that cannot be captured: report eager, with the reason
        if eager_m is None:
            eager_m = b.time(fn, policy, allow_graph=False, l2=l2)
        b.sync()
        return StepTiming(eager_m, eager_m, None, "eager",
                          (f"CUDA graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                           "timed eagerly, launch overhead included",))
    graph_m = b.time(g.replay, policy, allow_graph=False, l2=l2)
    del g
    notes = ["timed as a CUDA graph replay (captured once, static inputs)"]
    if eager_m is None:
        eager_m = graph_m
        notes.append("eager timing skipped")
    else:
        overhead = eager_m.stats.median_s - graph_m.stats.median_s
        notes.append(f"eager launches {eager_m.stats.median_s * 1e3:.3g} ms vs replay {graph_m.stats.median_s * 1e3:.3g} ms: "
                     f"launch overhead {overhead * 1e3:.3g} ms per step")
    return StepTiming(graph_m, eager_m, graph_m, "cuda-graph-replay", tuple(notes))
