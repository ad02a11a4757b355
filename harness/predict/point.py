"""The prediction of one served point: a typed, versioned record (JSON only at the edge, `to_dict`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.served import Percentiles, ServedPoint, ServedPrediction

PREDICTION_SCHEMA_VERSION = 1
# Format history: 1 — first version (deployment, workload, ttft/tpot/e2e percentiles, throughput per GPU, KV, calibration).


@dataclass(frozen=True)
class KvFigures:
    """The KV cache of the deployment's (decode-side) instances and whether it capped the batch."""

    tokens_per_instance: float  # tokens of context one instance's KV cache holds
    batch_limit: int  # requests whose whole sequences (input + output) fit in one instance's cache together
    max_running: int  # the engine's running-request limit per instance
    peak_running: int  # the most requests one instance ran at once in the simulation
    capped: bool  # KV memory held a request back (queued or preempted) at least once
    preemptions: int
    memory: str  # per-card breakdown (harness.model.serving_memory.ServingMemory.describe)


@dataclass(frozen=True)
class PredictedPoint:
    """What the twin predicts for one deployment under one workload (all figures SIMULATED)."""

    engine: str
    gpu: str
    model: str
    precision: str
    kv_dtype: str
    mode: str  # "agg" | "disagg" | "chapter"
    layout: str  # e.g. "1 × TP8" or "P 2 × TP4 + D 1 × TP8"
    gpus: int
    workload: str
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    request_throughput_per_s: float
    output_tokens_per_s: float
    request_throughput_per_gpu_s: float
    output_tokens_per_gpu_s: float
    kv: KvFigures | None
    calibration: str  # where the constants came from and how old they are
    calibration_kind: str  # "imported kernel data" | "our microbenchmarks" | "uncalibrated" | "chapter"
    rejected: int
    notes: tuple[str, ...] = ()
    compute_s: float = 0.0
    events: int = 0
    simulated: bool = True
    schema_version: int = field(default=PREDICTION_SCHEMA_VERSION)

    def served(self, point: ServedPoint) -> ServedPrediction:
        """The prediction as the shared served record (harness.served), for `compare_served`."""
        return ServedPrediction(point, f"harness {self.engine} twin ({self.calibration})", ttft_s=self.ttft_s,
                                tpot_s=self.tpot_s, e2e_s=self.e2e_s, request_throughput_per_s=self.request_throughput_per_s,
                                output_tokens_per_s=self.output_tokens_per_s, simulated=True, notes=self.notes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("ttft_s", "tpot_s", "e2e_s"):
            d[k] = getattr(self, k).to_dict()
        d["notes"] = list(self.notes)
        return d
