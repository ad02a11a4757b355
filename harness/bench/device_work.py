"""The device loop's work folder: the preset a call measures, its twins' labels, the JSON files of WORK and the planned
points as the shared records (harness.served.ServedPoint).

Below both the step runner (harness.bench.device_loop) and the offline comparison (harness.bench.device_compare), which
read the same folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.served import ServedPoint
from microbench.llama_cpp.run import Sweep

RUN_KIND = "loop-gpu-device"
TWINS = ("a", "b", "b_proxy")
TWIN_LABELS = {"a": "(a) llama-batched-bench step-time fit",
               "b": "(b) roofline, test-backend-ops MUL_MAT rates (the engine's kernels)",
               "b_proxy": "(b-proxy) roofline, torch GEMM and decode suites (labelled proxy: not the engine's kernels)"}


@dataclass(frozen=True)
class Preset:
    """What one device-loop call measures (everything a step needs that is not in WORK)."""

    device: str  # "cuda" | "cpu"
    shape: str  # harness.engines.random_gguf.SHAPES
    qtype: str
    threads: int  # llama.cpp CPU threads (the same for the tools and the server: the step-time fit checks it)
    slots: int
    ctx_per_slot: int
    n_batch: int
    n_ubatch: int
    sweep: Sweep
    mixes: tuple[tuple[int, int], ...]
    rate_fractions: tuple[float, ...]
    point_s: float
    repeats: int
    burst_requests: int
    suites: str  # harness micro run --suite (torch), "none" to skip
    startup_timeout_s: float = 180.0
    seed: int = 0
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sweep"] = asdict(self.sweep)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Preset":
        s = {k: tuple(v) if isinstance(v, list) else v for k, v in d["sweep"].items()}
        return cls(**{**d, "sweep": Sweep(**s), "mixes": tuple(tuple(m) for m in d["mixes"]),
                      "rate_fractions": tuple(d["rate_fractions"]), "notes": tuple(d.get("notes", ()))})


PRESETS = {
    # one H100/H200: Llama-3.1-8B shape in Q4_0 (4.2 GiB), 8 slots; sized so the whole call fits 9 minutes
    "cuda": Preset("cuda", "llama-3.1-8b", "Q4_0", threads=8, slots=8, ctx_per_slot=1024, n_batch=2048, n_ubatch=512,
                   sweep=Sweep(prompts=(64, 128, 256, 512, 1024), batches=(1, 2, 4, 8), gen_tokens=32, batched_reps=2,
                               op_tokens=(1, 8, 64, 512), op_reps=1),
                   mixes=((512, 64), (128, 256)), rate_fractions=(0.2, 0.6, 1.2), point_s=6.0, repeats=2,
                   burst_requests=40, suites="gemm,decode,transfer"),
    # the dry run on this CPU: the same steps on a tiny model, llama.cpp's CPU build
    "cpu": Preset("cpu", "tiny", "Q4_0", threads=2, slots=2, ctx_per_slot=512, n_batch=512, n_ubatch=128,
                  sweep=Sweep(prompts=(16, 32, 64, 128, 256), batches=(1, 2), gen_tokens=4, batched_reps=1,
                              op_tokens=(1, 16), op_reps=1),
                  mixes=((32, 8), (8, 16)), rate_fractions=(0.5,), point_s=3.0, repeats=2, burst_requests=10,
                  suites="none", startup_timeout_s=60.0),
}


def read_work(work: Path, name: str, what: str) -> Any:
    p = work / name
    if not p.is_file():
        raise HarnessError(f"{p} is missing: the {what} step did not run or failed (see checks.json and the log).")
    return json.loads(p.read_text())


def write_work(work: Path, name: str, data: Any) -> Path:
    p = work / name
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(p)
    return p


def load_preset(work: Path) -> Preset:
    return Preset.from_dict(read_work(work, "plan.json", "prepare")["preset"])


def served_point(pt: dict[str, Any]) -> Any:
    """A planned point of predictions.json as the shared record (harness.served.ServedPoint): a burst's rate is inf."""
    i, o = (int(x) for x in pt["mix"].split("/"))
    return ServedPoint(i, o, rate_per_s=math.inf if pt["kind"] == "burst" else float(pt["rate_per_s"]), workload=pt["mix"],
                       index=int(pt["point"]))
