"""The isolated stages of a CPU loop: the host constants calibrated, the Chapter 9 roofline's prediction of each stage,
the engine's measurement of it and their comparison (the error a signed fraction, harness.served.relative_error)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from harness.served import record_from_dict


@dataclass(frozen=True)
class CpuConstants:
    """Effective host constants measured with the microbenchmark timing core (harness.loop.calibrate)."""

    threads: int
    matmul_flops_per_s: float  # C_mm: FLOP-weighted over the model's prefill projections
    matmul_by_shape: dict[str, dict[str, float]]  # shape -> {m, n, k, flops, median_s, flops_per_s, cv}
    read_bandwidth_bytes_per_s: float  # B_ws: reading a buffer of the decode working set
    working_set_bytes: float
    dram_bandwidth_bytes_per_s: float | None  # B_dram: reading 4× LLC (None when skipped)
    dram_buffer_bytes: float | None
    llc_bytes: float | None
    torch_version: str
    source: str
    cpu_share: float | None = None  # this process's CPU-s / (wall × threads) while calibrating; < 0.85: contended

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "constants") -> "CpuConstants":
        return record_from_dict(cls, d, source)


@dataclass(frozen=True)
class StagePrediction:
    """The roofline's prediction of one isolated stage quantity."""

    quantity: str  # "prefill_tokens_per_s", "ttft_s", "decode_tokens_per_s@B"
    value: float
    bound: str  # compute | memory
    compute_s: float  # the compute term of the roofline for the unit of work
    memory_s: float
    flops: float
    bytes: float
    formula: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "stage prediction") -> "StagePrediction":
        return record_from_dict(cls, d, source)


@dataclass(frozen=True)
class StageMeasurement:
    """The engine's measurement of one isolated stage quantity."""

    quantity: str
    value: float  # engine-side figure (llama.cpp's own timings) — the primary measurement
    client_value: float | None  # the same quantity from the client's clock
    samples: tuple[float, ...]
    note: str
    engine_cpu_share: float | None = None  # median share of its cores the engine got while measured

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "stage measurement") -> "StageMeasurement":
        return record_from_dict(cls, d, source, samples=tuple)


@dataclass(frozen=True)
class StageComparison:
    """A stage's prediction against its measurement, and which roofline term is wrong by how much."""

    quantity: str
    predicted: float
    measured: float  # engine-side
    measured_client: float | None
    error: float  # (predicted − measured) / measured, a signed fraction
    bound: str
    compute_s: float
    memory_s: float
    verdict: str
    engine_cpu_share: float | None = None
    contended: bool = False  # the engine got less than CONTENDED_SHARE of its cores: rerun on an idle host

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "stage comparison") -> "StageComparison":
        return record_from_dict(cls, d, source)


CONTENDED_SHARE = 0.85  # a measurement during which the engine got less of its cores than this is contended


__all__ = ["CONTENDED_SHARE", "CpuConstants", "StageComparison", "StageMeasurement", "StagePrediction"]
