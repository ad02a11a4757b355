"""What the model asks of measured constants: the `Calibration` protocol and the records it returns.

The model owns this contract; harness.calibration implements it (harness.calibration.apply.
MeasuredConstants), so calibration depends on the model and never the other way. A calibration
gives the efficiency of a GPU at the scenario's decode batch and prefill tokens, the fitted link,
each at its value or at one end of its 95% interval, and where every constant came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from harness.model.stages import Efficiency

Which = Literal["value", "low", "high"]  # a constant's value, or the low / high end of its 95% interval


@dataclass(frozen=True, slots=True)
class LinkConstants:
    """A link as the hand-off time T = α + V/B uses it (§9.2.2): bandwidth B, startup latency α, a label."""

    bandwidth_bytes_per_s: float
    startup_latency_s: float
    label: str


@dataclass(frozen=True, slots=True)
class ConstantProvenance:
    """One constant the plan uses: its value and 95% interval, and whether it was measured or a default."""

    constant: str  # "<gpu>.compute_efficiency", "link.<spec>.bandwidth_bytes_per_s", ...
    origin: str  # "measured", "measured (proxy: <device>)" or "datasheet default"
    value: float | None
    low: float | None
    high: float | None
    at: Mapping[str, float] | None  # where the curve was read ({"batch": 32, "context_tokens": 8704}); None for a scalar
    source: str
    run_ids: tuple[str, ...]
    family: str | None = None  # kernel family of a measured efficiency ("cuda-bf16"); None for defaults and links


class Calibration(Protocol):
    """Measured constants that replace a scenario's datasheet defaults (`harness model plan --calibration FILE`)."""

    @property
    def source(self) -> str:
        """Where the constants come from (a file path, or "fitted from <runs>")."""
        ...

    @property
    def machine(self) -> str:
        """The machine the constants were measured on."""
        ...

    def efficiency(self, gpu: str, decode_batch: int, prefill_tokens: int, dtype: str,
                   which: Which = "value", decode_context_tokens: float | None = None) -> Efficiency | None:
        """Efficiency of `gpu` at the decode batch (and mean decode context) and prefill tokens per GPU, or None when
        nothing was measured; decode MBU depends on the context, so a calibration may refuse contexts it did not measure."""
        ...

    def link(self, name: str | None, which: Which = "value") -> LinkConstants | None:
        """The fitted link `name`, or None when it was not measured."""
        ...

    def provenance(self, gpus: Sequence[str], link_name: str | None, decode_batch: int, prefill_tokens: int,
                   dtype: str, link_default: LinkConstants | None,
                   decode_context_tokens: float | None = None) -> Sequence[ConstantProvenance]:
        """One row per constant the plan uses (`link_default`: the scenario's own link, shown where none was fitted)."""
        ...
