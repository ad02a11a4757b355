"""Where the digital twin gets its times: prefill of a prompt and one batched decode step, from any source.

A `StepTimes` source answers two questions (seconds): `prefill_time_s(prompt_tokens, cached_tokens)`
and `decode_step_time_s(batch, context_tokens)`. Sources:

- `RooflineStepTimes`: Chapter 9, §9.2.3's roofline with effective constants (C = FLOP/s,
  B = bytes/s, efficiency 1): t = max(F/C, W/B) over the model's forward-pass accounting
  (harness.model.forward). Built from the CPU loop's calibrated C_mm and B_ws, or any host spec.
- `ServiceModelStepTimes`: the chapter's per-GPU service model (harness.target.service_times), the
  chapter mode of the embedded target.
- engine-calibrated fits (harness.calibration.step_time, when present) satisfy the same protocol.

`CachedStepTimes` memoises any source on a context grid so a discrete-event simulation of
thousands of steps stays cheap.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from harness.errors import HarnessError
from harness.model.forward import decode_step_work, prefill_work
from harness.specs.models import ModelSpec

# step times are evaluated on a context grid this coarse (tokens): the error is far below 1% of a step
CONTEXT_GRID_TOKENS = 16


@runtime_checkable
class StepTimes(Protocol):
    """Seconds the engine needs for a prompt and for one decode step (the twin's only timing input)."""

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float: ...

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float: ...


def _check_tokens(name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
        raise HarnessError(f"{name} must be a number >= {low}, got {v!r}.")
    return int(v)


@dataclass(frozen=True)
class RooflineStepTimes:
    """max(F/C, W/B) with effective constants (Chapter 9, §9.2.3; efficiency already inside C and B)."""

    model: ModelSpec
    flops_per_s: float
    bytes_per_s: float
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_elem: float = 2.0
    source: str = "roofline"

    def __post_init__(self) -> None:
        for name in ("flops_per_s", "bytes_per_s", "weight_bytes_per_param", "kv_bytes_per_elem"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise HarnessError(f"RooflineStepTimes.{name} must be a positive number, got {v!r}.")

    def prefill_terms_s(self, prompt_tokens: int, cached_tokens: int = 0) -> tuple[float, float]:
        w = prefill_work(self.model, prompt_tokens, cached_tokens, self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return w.flops / self.flops_per_s, w.bytes / self.bytes_per_s

    def decode_terms_s(self, batch: int, context_tokens: float) -> tuple[float, float]:
        w = decode_step_work(self.model, batch, float(context_tokens), self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return w.flops / self.flops_per_s, w.bytes / self.bytes_per_s

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        _check_tokens("prompt_tokens", prompt_tokens, 1)
        return max(self.prefill_terms_s(int(prompt_tokens), int(cached_tokens)))

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        _check_tokens("batch", batch, 1)
        return max(self.decode_terms_s(int(batch), context_tokens))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "roofline", "model": self.model.name, "flops_per_s": self.flops_per_s, "bytes_per_s": self.bytes_per_s,
                "weight_bytes_per_param": self.weight_bytes_per_param, "kv_bytes_per_elem": self.kv_bytes_per_elem,
                "source": self.source}


@dataclass(frozen=True)
class ServiceModelStepTimes:
    """The chapter's GPU service model (harness.target.service_times.GpuServiceModel) as a StepTimes source."""

    service: Any  # GpuServiceModel

    def to_dict(self) -> dict[str, Any]:
        s = self.service
        return {"kind": "service-model", "gpu": s.gpu.name, "model_spec": asdict(s.model), "efficiency": asdict(s.efficiency),
                "weight_bytes_per_param": s.weight_bytes_per_param, "kv_bytes_per_elem": s.kv_bytes_per_elem,
                "source": f"Chapter 9 roofline on {s.gpu.name} with efficiency {s.efficiency.compute:g} / {s.efficiency.bandwidth:g}"}

    @property
    def source(self) -> str:
        return self.to_dict()["source"]

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        return self.service.prefill_s(prompt_tokens, cached_tokens)

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        return self.service.decode_step_s(batch, context_tokens)


@dataclass(frozen=True)
class CachedStepTimes:
    """Memoises a source: prefill by (tokens, cached), decode by (batch, context rounded to CONTEXT_GRID_TOKENS)."""

    inner: StepTimes
    grid_tokens: int = CONTEXT_GRID_TOKENS
    _prefill: Any = field(init=False, repr=False, compare=False)
    _step: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_prefill", lru_cache(maxsize=1 << 16)(self.inner.prefill_time_s))
        object.__setattr__(self, "_step", lru_cache(maxsize=1 << 16)(self.inner.decode_step_time_s))

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        return self._prefill(int(prompt_tokens), int(cached_tokens))

    def __getattr__(self, name: str) -> Any:  # optional methods of the source (mixed_step_time_s, to_dict, source)
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        g = self.grid_tokens
        ctx = max(g, int(round(context_tokens / g)) * g)
        return self._step(int(batch), ctx)


@dataclass(frozen=True)
class CalibratedStepTimes:
    """The engine-calibrated step-time fit (harness.calibration.step_time.StepTimeModel) as a StepTimes source.

    The fit returns intervals; `bound` picks the point estimate ("value") or a 95 % bound ("low", "high"),
    so the twin can be run at both ends of the calibration's uncertainty.
    """

    model: Any  # StepTimeModel: prefill_s(p, cached) / decode_step_s(b, ctx) / mixed_step_s(...) -> Interval
    calibration_file: str
    engine_settings: dict[str, Any]
    proxy: bool = False
    bound: str = "value"

    def __post_init__(self) -> None:
        if self.bound not in ("value", "low", "high"):
            raise HarnessError(f"CalibratedStepTimes.bound must be 'value', 'low' or 'high', got {self.bound!r}.")

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        return getattr(self.model.prefill_s(int(prompt_tokens), int(cached_tokens)), self.bound)

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        return getattr(self.model.decode_step_s(int(batch), float(context_tokens)), self.bound)

    def mixed_step_time_s(self, decode_batch: int, context_tokens: float, prefill_tokens: int, cached_tokens: int = 0) -> float:
        return getattr(self.model.mixed_step_s(int(decode_batch), float(context_tokens), int(prefill_tokens), int(cached_tokens)), self.bound)

    @property
    def source(self) -> str:
        notes = "; ".join(getattr(self.model, "notes", ()) or ())
        return f"engine-calibrated step times from {self.calibration_file} ({self.bound})" + (f"; {notes}" if notes else "")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "calibrated", "calibration_file": self.calibration_file, "engine_settings": self.engine_settings,
                "proxy": self.proxy, "bound": self.bound, "source": self.source}


def _step_time_module() -> Any:
    try:
        import harness.calibration.step_time as m  # noqa: PLC0415 - the calibrated step-time mode, imported only when used
    except ImportError:
        raise HarnessError("a step-time calibration needs harness.calibration.step_time (the calibrated step-time mode); "
                           "update the harness, or run without --calibration to use the roofline constants.") from None
    return m


def calibrated_step_times(calibration_file: str, engine_settings: Any, *, proxy: bool = False, bound: str = "value") -> CalibratedStepTimes:
    """Load the engine-calibrated fit for these engine settings (kernel family, threads, model); refuses mismatches unless proxy.

    `engine_settings`: an EngineSettings, its dict, or an engine config (harness.engines.config.EngineConfig)."""
    m = _step_time_module()
    EngineSettings, step_time_model = m.EngineSettings, m.step_time_model
    if isinstance(engine_settings, EngineSettings):
        es = engine_settings
    elif isinstance(engine_settings, dict):
        es = EngineSettings(**engine_settings)
    else:
        es = EngineSettings.from_engine_config(engine_settings)
    model = step_time_model(calibration_file, es, proxy=proxy)
    return CalibratedStepTimes(model, str(calibration_file), asdict(es), proxy, bound)


@dataclass(frozen=True)
class GpuRooflineStepTimes:
    """Chapter 9 roofline on a GPU spec, the efficiency taken per step from a calibration's curves (or a fixed one)."""

    gpu: Any  # GpuSpec
    model: Any  # ModelSpec
    dtype: str = "bf16"
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_elem: float = 2.0
    constants: Any = None  # harness.calibration.apply.MeasuredConstants, or None: fixed `efficiency`
    efficiency: Any = None  # harness.model.stages.Efficiency used when constants is None
    calibration_file: str | None = None

    def _eff(self, batch: int, tokens: int) -> Any:
        from harness.model.stages import Efficiency  # noqa: PLC0415

        if self.constants is not None:
            e = self.constants.efficiency(self.gpu.name, batch, tokens, self.dtype)
            if e is not None:
                return e
        return self.efficiency or Efficiency()

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        from harness.model.forward import prefill_work  # noqa: PLC0415
        from harness.target.service_times import roofline_s  # noqa: PLC0415

        w = prefill_work(self.model, int(prompt_tokens), int(cached_tokens), self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return roofline_s(w.flops, w.bytes, self.gpu, self._eff(1, int(prompt_tokens)))

    def decode_step_time_s(self, batch: int, context_tokens: float) -> float:
        from harness.model.forward import decode_step_work  # noqa: PLC0415
        from harness.target.service_times import roofline_s  # noqa: PLC0415

        w = decode_step_work(self.model, int(batch), float(context_tokens), self.weight_bytes_per_param, self.kv_bytes_per_elem)
        return roofline_s(w.flops, w.bytes, self.gpu, self._eff(int(batch), 1))

    @property
    def source(self) -> str:
        if self.constants is not None:
            return f"Chapter 9 roofline on {self.gpu.name}, efficiency curves from {self.calibration_file}"
        e = self.efficiency
        return (f"UNCALIBRATED: Chapter 9 roofline on the {self.gpu.name} datasheet with efficiency "
                f"{getattr(e, 'compute', 0.5):g} compute / {getattr(e, 'bandwidth', 0.5):g} bandwidth")

    def to_dict(self) -> dict[str, Any]:
        from harness.model.stages import Efficiency  # noqa: PLC0415

        return {"kind": "gpu-roofline", "gpu": self.gpu.name,
                "model_spec": asdict(self.model), "dtype": self.dtype, "calibration_file": self.calibration_file,
                "efficiency": asdict(self.efficiency or Efficiency()), "weight_bytes_per_param": self.weight_bytes_per_param,
                "kv_bytes_per_elem": self.kv_bytes_per_elem, "source": self.source}
