"""The calibration record: every fitted constant with its interval, its method and the runs it came from.

All values are in base units (s, bytes/s, FLOP/s, fractions of the spec peak). Intervals are
bootstrap percentile intervals (2.5 %, 97.5 %) over the raw samples with a fixed seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from harness.errors import HarnessError
from harness.model.kernel_tables import KernelTables
from harness.model.kernel_tables_codec import tables_from_dict, tables_to_dict

Which = Literal["value", "low", "high"]


def _f(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)


class FieldError(ValueError):
    """A bad field of a calibration file, with its path (curves[0].points[2].measured.value)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path, self.problem = path, problem


def at(path: str, fn: Any, *args: Any) -> Any:
    """fn(*args), with any failure reported as a FieldError under `path` (prefixing the inner path)."""
    try:
        return fn(*args)
    except FieldError as e:
        sep = "" if e.path.startswith("[") else "."
        raise FieldError(f"{path}{sep}{e.path}" if path and e.path else (path or e.path), e.problem) from None
    except KeyError as e:
        raise FieldError(path, f"field {e.args[0]!r} is missing") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise FieldError(path, f"bad value ({e})") from None


def _num(d: Any, key: str) -> float:
    if not isinstance(d, dict):
        raise FieldError("", f"must be an object {{...}}, got {d!r}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FieldError(key, f"must be a number, got {v!r}")
    return float(v)


def _str(d: Any, key: str, optional: bool = False) -> str | None:
    v = d.get(key) if optional else d[key]
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise FieldError(key, f"must be a string{' or null' if optional else ''}, got {v!r}")
    return v


def _items(d: Any, key: str, default: Any = ()) -> list:
    v = d.get(key, default) if isinstance(d, dict) else d[key]
    if v is None:
        return []
    if not isinstance(v, list):
        raise FieldError(key, f"must be a list, got {type(v).__name__}")
    return v


def _each(d: Any, key: str, parse: Any) -> tuple:
    return tuple(at(f"{key}[{i}]", parse, x) for i, x in enumerate(_items(d, key)))


@dataclass(frozen=True)
class Estimate:
    """One fitted number: value, 95 % bootstrap interval [low, high], unit, how and from what it came."""

    value: float
    low: float
    high: float
    unit: str
    n_samples: int
    run_ids: tuple[str, ...]
    method: str

    def __post_init__(self) -> None:
        for f in ("value", "low", "high"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise HarnessError(f"calibration estimate ({self.method}): {f} must be a finite number, got {v!r}.")

    def pick(self, which: Which) -> float:
        return {"value": self.value, "low": self.low, "high": self.high}[which]

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "unit": self.unit,
                "n_samples": self.n_samples, "run_ids": list(self.run_ids), "method": self.method}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Estimate":
        n = d["n_samples"] if isinstance(d, dict) else None
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise FieldError("n_samples", f"must be an integer >= 0, got {n!r}")
        try:
            return cls(_num(d, "value"), _num(d, "low"), _num(d, "high"), str(d["unit"]), n,
                       tuple(str(r) for r in _items(d, "run_ids", None)), str(d["method"]))
        except HarnessError as e:  # a non-finite value, named by __post_init__
            raise FieldError("", str(e)) from None


@dataclass(frozen=True)
class CurvePoint:
    """A measured efficiency at one x (batch or tokens per GPU) and the monotone fit's value there."""

    x: float
    measured: Estimate
    fitted: float
    case_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"x": self.x, "measured": self.measured.to_dict(), "fitted": self.fitted, "case_ids": list(self.case_ids)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CurvePoint":
        return cls(_num(d, "x"), at("measured", Estimate.from_dict, d["measured"]), _num(d, "fitted"),
                   tuple(str(c) for c in _items(d, "case_ids", None)))


@dataclass(frozen=True)
class EfficiencyCurve:
    """Efficiency (fraction of the spec peak) vs x, interpolated piecewise-linearly between the points.

    Chapter 9, §9.2.3: decode bandwidth efficiency rises from 33 % at batch 1 to 65 % at batch 64;
    linear interpolation in the batch gives 0.33 + (0.65-0.33)·31/63 ≈ 49 % at 32, the chapter's
    figure. Outside the measured range the end value is held (and the caller says so).
    """

    device: str  # GPU spec name ("h200-sxm") or "cpu"
    quantity: Literal["decode_bandwidth_efficiency", "prefill_compute_efficiency"]
    x_name: Literal["batch", "tokens_per_gpu"]
    dtype: str
    backend: str
    monotone: bool
    peak_source: str
    points: tuple[CurvePoint, ...]
    context_tokens: int | None = None  # decode: the context the batch sweep ran at (MBU depends on it)
    family: str = ""  # kernel family (harness.calibration.family): "torch-fp32", "cuda-bf16"; "" = derive from backend/dtype

    @property
    def kernel_family(self) -> str:
        from harness.calibration.family import case_family

        return self.family or case_family(self.backend, self.dtype, "cpu" if self.device == "cpu" else "cuda")

    def at(self, x: float, which: Which = "value") -> float:
        xs = np.array([p.x for p in self.points])
        if which == "value":
            ys = np.array([p.fitted for p in self.points])
        elif which == "low":
            ys = np.array([min(p.measured.low, p.fitted) for p in self.points])
        else:
            ys = np.array([max(p.measured.high, p.fitted) for p in self.points])
        return float(np.interp(x, xs, ys))

    def in_range(self, x: float) -> bool:
        return self.points[0].x <= x <= self.points[-1].x

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(sorted({r for p in self.points for r in p.measured.run_ids}))

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "quantity": self.quantity, "x_name": self.x_name, "dtype": self.dtype,
                "backend": self.backend, "monotone": self.monotone, "peak_source": self.peak_source,
                "family": self.kernel_family,
                "interpolation": "piecewise linear in x over the fitted points; end values held outside the range",
                "context_tokens": self.context_tokens, "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EfficiencyCurve":
        pts = _each(d, "points", CurvePoint.from_dict)
        if not pts:
            raise FieldError("points", f"curve {d.get('quantity')!r} of {d.get('device')!r} has no points")
        if any(b.x <= a.x for a, b in zip(pts, pts[1:])):
            raise FieldError("points", "x must increase from point to point")
        for key, allowed in (("quantity", ("decode_bandwidth_efficiency", "prefill_compute_efficiency")),
                             ("x_name", ("batch", "tokens_per_gpu"))):
            if d[key] not in allowed:
                raise FieldError(key, f"must be one of {', '.join(allowed)}, got {d[key]!r}")
        for key in ("device", "dtype", "backend", "peak_source"):
            if not isinstance(d[key], str):
                raise FieldError(key, f"must be a string, got {d[key]!r}")
        ctx = d.get("context_tokens")
        if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 0):
            raise FieldError("context_tokens", f"must be an integer >= 0 or null, got {ctx!r}")
        return cls(d["device"], d["quantity"], d["x_name"], d["dtype"], d["backend"], bool(d["monotone"]),
                   d["peak_source"], pts, None if ctx is None else int(ctx), str(d.get("family", "")))


@dataclass(frozen=True)
class LinkFit:
    """T(S) = α + S/β fitted by weighted least squares over transfer sizes (Chapter 9, §9.2.2)."""

    link: str
    direction: str
    memory: str | None
    alpha_s: Estimate
    bandwidth_bytes_per_s: Estimate
    sizes_bytes: tuple[float, ...]
    median_s: tuple[float, ...]
    fitted_s: tuple[float, ...]
    weighting: str
    method: str | None = None  # how the copies were issued (copy_engine, sm_kernel, a tool's test), when recorded
    byte_convention: str = ""  # what β counts: payload bytes once (nvbandwidth's convention)

    @property
    def key(self) -> str:
        return ":".join(x for x in (self.link, self.direction, self.memory, self.method) if x)

    @property
    def residual_fraction(self) -> tuple[float, ...]:
        return tuple((m - f) / f for m, f in zip(self.median_s, self.fitted_s))

    def to_dict(self) -> dict[str, Any]:
        return {"link": self.link, "direction": self.direction, "memory": self.memory,
                "alpha_s": self.alpha_s.to_dict(), "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s.to_dict(),
                "sizes_bytes": list(self.sizes_bytes), "median_s": list(self.median_s), "fitted_s": list(self.fitted_s),
                "residual_fraction": list(self.residual_fraction), "weighting": self.weighting,
                "method": self.method, "byte_convention": self.byte_convention}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LinkFit":
        nums = {k: tuple(at(f"{k}[{i}]", float, x) for i, x in enumerate(_items(d, k, None)))
                for k in ("sizes_bytes", "median_s", "fitted_s")}
        return cls(_str(d, "link"), _str(d, "direction"), _str(d, "memory", optional=True), at("alpha_s", Estimate.from_dict, d["alpha_s"]),
                   at("bandwidth_bytes_per_s", Estimate.from_dict, d["bandwidth_bytes_per_s"]), nums["sizes_bytes"],
                   nums["median_s"], nums["fitted_s"], str(d["weighting"]), _str(d, "method", optional=True),
                   str(d.get("byte_convention", "")))


@dataclass(frozen=True)
class StageMeasurement:
    """A measured stage rate from the stage suite: r_P (new tokens/s) or r_D (decode calls/s)."""

    device: str
    phase: Literal["prefill", "decode"]
    model: str
    tokens: int | None  # prefill: L
    batch: int | None  # decode: B
    context_tokens: int | None
    rate: Estimate  # prefill_tokens_per_s or decode_calls_per_s
    peak_flops_per_s: float | None
    peak_bytes_per_s: float | None
    case_id: str
    useful_flops: float = 0.0  # per call, as the case counted them (the model's own counts)
    useful_bytes: float = 0.0
    dtype: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "phase": self.phase, "model": self.model, "tokens": self.tokens,
                "batch": self.batch, "context_tokens": self.context_tokens, "rate": self.rate.to_dict(),
                "peak_flops_per_s": self.peak_flops_per_s, "peak_bytes_per_s": self.peak_bytes_per_s,
                "case_id": self.case_id, "useful_flops": self.useful_flops, "useful_bytes": self.useful_bytes,
                "dtype": self.dtype}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StageMeasurement":
        if d["phase"] not in ("prefill", "decode"):
            raise FieldError("phase", f"must be prefill or decode, got {d['phase']!r}")
        for key in ("tokens", "batch", "context_tokens"):
            v = d.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise FieldError(key, f"must be an integer >= 0 or null, got {v!r}")
        return cls(_str(d, "device"), d["phase"], _str(d, "model"), d.get("tokens"), d.get("batch"), d.get("context_tokens"),
                   at("rate", Estimate.from_dict, d["rate"]), at("peak_flops_per_s", _f, d.get("peak_flops_per_s")),
                   at("peak_bytes_per_s", _f, d.get("peak_bytes_per_s")), _str(d, "case_id"),
                   float(d.get("useful_flops") or 0.0), float(d.get("useful_bytes") or 0.0), str(d.get("dtype", "")))


@dataclass(frozen=True)
class RunRef:
    run_id: str
    kind: str
    status: str
    created_unix_s: float
    suites: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "kind": self.kind, "status": self.status,
                "created_unix_s": self.created_unix_s, "suites": list(self.suites)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunRef":
        return cls(_str(d, "run_id"), _str(d, "kind"), _str(d, "status"), _num(d, "created_unix_s"),
                   tuple(str(x) for x in _items(d, "suites")))


@dataclass(frozen=True)
class CollectiveFit:
    """T(S) = α + S/β of one collective (all-reduce, ...) at one GPU count, over message sizes (§9.2.2's α–β form).

    β is the algorithm bandwidth: payload bytes S over the time (nccl-tests' `algbw`), not the bus bandwidth;
    the measured sizes and times are kept so a caller can read the time at a size (`time_s`) instead of the fit.
    """

    op: str  # "all_reduce", "all_gather", ...
    num_gpus: int
    implementation: str  # "nccl", "vllm_graph", "trtllm_auto", ...: the kernel that ran the collective
    dtype: str
    alpha_s: Estimate
    bandwidth_bytes_per_s: Estimate
    sizes_bytes: tuple[float, ...]
    median_s: tuple[float, ...]
    fitted_s: tuple[float, ...]
    family: str = ""  # kernel family of the runs it came from ("aic-vllm-0.24.0", "cuda")

    @property
    def key(self) -> str:
        return f"{self.op}:{self.num_gpus}:{self.implementation}"

    def time_s(self, size_bytes: float) -> float:
        """The time at `size_bytes`: log-log interpolation of the measured sizes inside their range, α + S/β outside."""
        xs = np.log(np.asarray(self.sizes_bytes, dtype=float))
        if size_bytes <= 0:
            return self.alpha_s.value
        if len(xs) >= 2 and xs[0] <= math.log(size_bytes) <= xs[-1]:
            return float(np.exp(np.interp(math.log(size_bytes), xs, np.log(np.asarray(self.median_s, dtype=float)))))
        return self.alpha_s.value + size_bytes / self.bandwidth_bytes_per_s.value

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "num_gpus": self.num_gpus, "implementation": self.implementation, "dtype": self.dtype,
                "family": self.family, "alpha_s": self.alpha_s.to_dict(),
                "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s.to_dict(), "sizes_bytes": list(self.sizes_bytes),
                "median_s": list(self.median_s), "fitted_s": list(self.fitted_s)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CollectiveFit":
        nums = {k: tuple(at(f"{k}[{i}]", float, x) for i, x in enumerate(_items(d, k, None)))
                for k in ("sizes_bytes", "median_s", "fitted_s")}
        if not (len(nums["sizes_bytes"]) == len(nums["median_s"]) == len(nums["fitted_s"])) or not nums["sizes_bytes"]:
            raise FieldError("sizes_bytes", "sizes_bytes, median_s and fitted_s must be non-empty lists of one length")
        if any(b <= a for a, b in zip(nums["sizes_bytes"], nums["sizes_bytes"][1:])):
            raise FieldError("sizes_bytes", "sizes must increase from point to point")
        n = d["num_gpus"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise FieldError("num_gpus", f"must be an integer >= 2, got {n!r}")
        return cls(_str(d, "op"), n, _str(d, "implementation"), _str(d, "dtype"),
                   at("alpha_s", Estimate.from_dict, d["alpha_s"]),
                   at("bandwidth_bytes_per_s", Estimate.from_dict, d["bandwidth_bytes_per_s"]), nums["sizes_bytes"],
                   nums["median_s"], nums["fitted_s"], str(d.get("family", "")))


# "synthetic": runs generated from known constants (harness.calibration.synthetic), for tests; never in the shipped database
SOURCE_KINDS = ("imported kernel data", "our microbenchmarks", "synthetic")


@dataclass(frozen=True)
class Provenance:
    """Where a calibration came from, as the GPU calibration database (calibration/gpus/) keeps it with every entry.

    Dates are ISO dates (YYYY-MM-DD). `measured_date` is when the kernels were timed, when known (our runs record
    it; an imported database may not); `filed_date` is when the entry was fitted and filed.
    """

    source_kind: str  # one of SOURCE_KINDS
    source: str  # "aiconfigurator 0.12.0", "harness micro run (torch 2.9.0)"
    gpu: str  # GPU spec name (`harness specs gpus`)
    family: str  # the entry's kernel family ("aic-trtllm-1.3.0rc20", "cuda")
    filed_date: str
    command: str  # the command that measured or imported the runs, then the one that filed them
    device_name: str | None = None  # as the driver reports it ("NVIDIA H200")
    driver: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    engine: str | None = None  # "trtllm", "vllm", "sglang", "llama.cpp"; None for torch/cuBLAS suites
    engine_version: str | None = None
    measured_date: str | None = None
    run_ids: tuple[str, ...] = ()
    reference_model: str | None = None  # the model whose shapes a kernel grid was read at (imported kernel data)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from datetime import date

        if self.source_kind not in SOURCE_KINDS:
            raise HarnessError(f"calibration provenance: source_kind must be one of {', '.join(SOURCE_KINDS)}, "
                               f"got {self.source_kind!r}.")
        for f in ("filed_date", "measured_date"):
            v = getattr(self, f)
            if v is None and f == "measured_date":
                continue
            try:
                date.fromisoformat(str(v))
            except ValueError:
                raise HarnessError(f"calibration provenance: {f} must be an ISO date (YYYY-MM-DD), got {v!r}.") from None

    @property
    def date(self) -> str:
        """The date the entry stands for: when measured, else when filed."""
        return self.measured_date or self.filed_date

    def to_dict(self) -> dict[str, Any]:
        return {"source_kind": self.source_kind, "source": self.source, "gpu": self.gpu, "family": self.family,
                "device_name": self.device_name, "driver": self.driver, "torch_version": self.torch_version,
                "cuda_version": self.cuda_version, "engine": self.engine, "engine_version": self.engine_version,
                "measured_date": self.measured_date, "filed_date": self.filed_date, "run_ids": list(self.run_ids),
                "command": self.command, "reference_model": self.reference_model, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Provenance":
        if not isinstance(d, dict):
            raise FieldError("", f"must be an object {{...}}, got {d!r}")
        opt = {k: _str(d, k, optional=True) for k in ("device_name", "driver", "torch_version", "cuda_version", "engine",
                                                      "engine_version", "measured_date", "reference_model")}
        try:
            return cls(_str(d, "source_kind"), _str(d, "source"), _str(d, "gpu"), _str(d, "family"), _str(d, "filed_date"),
                       _str(d, "command"), run_ids=tuple(str(r) for r in _items(d, "run_ids")),
                       notes=tuple(str(n) for n in _items(d, "notes")), **opt)
        except HarnessError as e:
            raise FieldError("", str(e).removeprefix("calibration provenance: ").rstrip(".")) from None


@dataclass(frozen=True)
class CalibrationRecord:
    """Everything `harness calibrate` fitted from one machine's runs."""

    machine: str
    key_facts: dict[str, Any]
    runs: tuple[RunRef, ...]
    seed: int
    n_bootstrap: int
    curves: tuple[EfficiencyCurve, ...] = ()
    links: tuple[LinkFit, ...] = ()
    cpu_expert_flops_per_s: Estimate | None = None  # C_C (§9.3.2)
    host_memory_bandwidth_bytes_per_s: Estimate | None = None  # B_D (§9.3.2)
    storage: dict[str, Estimate] = field(default_factory=dict)  # "read"/"write" -> bytes/s
    stages: tuple[StageMeasurement, ...] = ()
    proxy: dict[str, str] = field(default_factory=dict)  # scenario GPU -> measured device standing in for it
    warnings: tuple[str, ...] = ()
    created_unix_s: float = 0.0
    harness_version: str = ""
    collectives: tuple[CollectiveFit, ...] = ()  # all-reduce and other collectives by size (schema 3)
    provenance: Provenance | None = None  # where the runs came from (schema 3; required in calibration/gpus/)
    reference_model: str = ""  # the model whose shapes kernel grids (imported kernel data) were read at; "" = none
    # the measured kernel grids the step model interpolates (schema 4; harness.model.kernel_tables_codec), or None
    kernel_tables: KernelTables | None = None

    def collective(self, op: str, num_gpus: int, implementation: str | None = None) -> CollectiveFit | None:
        """The fit of `op` at `num_gpus`, of `implementation` when given, else the fastest at 1 MiB."""
        cands = [c for c in self.collectives if c.op == op and c.num_gpus == num_gpus
                 and (implementation is None or c.implementation == implementation)]
        return min(cands, key=lambda c: c.time_s(1 << 20)) if cands else None

    def curve(self, device: str, quantity: str, dtype: str | None = None) -> EfficiencyCurve | None:
        """The curve for a device and quantity, preferring `dtype`, then bf16, fp16, fp32 in that order
        (of several decode contexts, the first; `curves_at_contexts` gives them all)."""
        found = self.curves_at_contexts(device, quantity, dtype)
        return found[0] if found else None

    def curves_at_contexts(self, device: str, quantity: str, dtype: str | None = None) -> tuple[EfficiencyCurve, ...]:
        """Every curve of the preferred dtype (see `curve`), one per measured context, by context."""
        cands = [c for c in self.curves if c.device == device and c.quantity == quantity]
        for want in (dtype, "bf16", "fp16", "fp32"):
            got = [c for c in cands if c.dtype == want]
            if got:
                return tuple(sorted(got, key=lambda c: c.context_tokens or 0))
        if not cands:
            return ()
        first = cands[0].dtype
        return tuple(sorted((c for c in cands if c.dtype == first), key=lambda c: c.context_tokens or 0))

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted({c.device for c in self.curves} | {s.device for s in self.stages}))

    def link(self, key: str) -> LinkFit | None:
        for lf in self.links:
            if key in (lf.key, lf.link, f"{lf.link}:{lf.direction}"):
                return lf
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine, "key_facts": self.key_facts, "created_unix_s": self.created_unix_s,
            "harness_version": self.harness_version, "seed": self.seed, "n_bootstrap": self.n_bootstrap,
            "runs": [r.to_dict() for r in self.runs], "proxy": self.proxy,
            "curves": [c.to_dict() for c in self.curves], "links": [lf.to_dict() for lf in self.links],
            "cpu_expert_flops_per_s": self.cpu_expert_flops_per_s.to_dict() if self.cpu_expert_flops_per_s else None,
            "host_memory_bandwidth_bytes_per_s": (
                self.host_memory_bandwidth_bytes_per_s.to_dict() if self.host_memory_bandwidth_bytes_per_s else None
            ),
            "storage": {k: v.to_dict() for k, v in self.storage.items()},
            "stages": [s.to_dict() for s in self.stages], "collectives": [c.to_dict() for c in self.collectives],
            "provenance": self.provenance.to_dict() if self.provenance else None,
            "reference_model": self.reference_model, "warnings": list(self.warnings),
            "kernel_tables": tables_to_dict(self.kernel_tables) if self.kernel_tables is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CalibrationRecord":
        est = lambda k: at(k, Estimate.from_dict, d[k]) if d.get(k) else None  # noqa: E731
        storage = d.get("storage") or {}
        if not isinstance(storage, dict):
            raise FieldError("storage", f"must be an object {{read, write}}, got {storage!r}")
        if not isinstance(d["machine"], str):
            raise FieldError("machine", f"must be a string, got {d['machine']!r}")
        proxy = d.get("proxy") or {}
        if not isinstance(proxy, dict) or not all(isinstance(v, str) for v in proxy.values()):
            raise FieldError("proxy", f"must map names to names, got {proxy!r}")
        return cls(
            machine=d["machine"], key_facts=at("key_facts", dict, d["key_facts"]), runs=_each(d, "runs", RunRef.from_dict),
            seed=at("seed", int, d["seed"]), n_bootstrap=at("n_bootstrap", int, d["n_bootstrap"]),
            curves=_each(d, "curves", EfficiencyCurve.from_dict),
            links=_each(d, "links", LinkFit.from_dict),
            cpu_expert_flops_per_s=est("cpu_expert_flops_per_s"),
            host_memory_bandwidth_bytes_per_s=est("host_memory_bandwidth_bytes_per_s"),
            storage={k: at(f"storage.{k}", Estimate.from_dict, v) for k, v in storage.items()},
            stages=_each(d, "stages", StageMeasurement.from_dict),
            proxy=proxy, warnings=tuple(str(w) for w in _items(d, "warnings")),
            created_unix_s=at("created_unix_s", float, d.get("created_unix_s", 0.0)),
            harness_version=str(d.get("harness_version", "")),
            collectives=_each(d, "collectives", CollectiveFit.from_dict),
            provenance=at("provenance", Provenance.from_dict, d["provenance"]) if d.get("provenance") is not None else None,
            reference_model=str(d.get("reference_model") or ""),
            kernel_tables=(at("kernel_tables", tables_from_dict, d["kernel_tables"])
                           if d.get("kernel_tables") is not None else None),
        )
