"""Measured constants as the model uses them: efficiency at a scenario's batch, context and tokens; a fitted link.

Chapter 9, §9.2.3: the decode stage runs at the bandwidth efficiency of its batch (the chapter
reads ≈49 % at batch 32 off the 33 %→65 % curve) and the prefill stage at the compute efficiency
of its tokens per GPU (58–62 %). Decode MBU also depends on the context (the KV share of the bytes
grows with it), so a decode curve is used only at contexts the measured ones cover: between two
measured contexts it is interpolated linearly in the context, within CONTEXT_SLACK beyond the
measured ones the nearest is held, and further out the datasheet default is kept and the label
says which context to measure. A scenario GPU uses the curves measured on that GPU, or on the
device the calibration's `proxy` names for it (the chapter itself applied RTX PRO 6000 curves to
A100 and H20); anything not measured stays at the datasheet default, and every figure says which.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.calibration.family import is_engine_cuda_family
from harness.calibration.record import CalibrationRecord, CollectiveFit, EfficiencyCurve, LinkFit, Which
from harness.model.calibration import ConstantProvenance, LinkConstants
from harness.model.stages import Efficiency

DEFAULT_EFFICIENCY = 0.5
MODEL_METHOD = "copy_engine:single"  # microbench.transfer.copy_method("ce", MODEL_ALPHA)
CONTEXT_SLACK = 0.10  # a decode curve is held up to 10 % beyond the contexts it was measured at


def _clamp(x: float) -> float:
    return min(1.0, max(1e-6, x))


@dataclass(frozen=True)
class DecodeReading:
    """The decode MBU read at (batch, context), or why none was: `value` None means not applicable."""

    value: float | None
    low: float | None
    high: float | None
    label: str
    curves: tuple[EfficiencyCurve, ...]


def read_decode_curves(curves: tuple[EfficiencyCurve, ...], batch: float, context_tokens: float | None,
                       which: Which = "value") -> DecodeReading:
    """MBU(batch, context) from the per-context decode curves, or a refusal naming the context to measure."""
    if not curves:
        return DecodeReading(None, None, None, "no decode curve", ())
    known = [c for c in curves if c.context_tokens]
    if not known or context_tokens is None:
        c = curves[0]
        why = ("context not recorded by the calibration" if not known
               else f"measured at context {c.context_tokens}; the caller gave no context to check")
        return DecodeReading(c.at(batch, which), c.at(batch, "low"), c.at(batch, "high"), why, (c,))
    known.sort(key=lambda c: c.context_tokens or 0)
    lo_c, hi_c = known[0].context_tokens or 0, known[-1].context_tokens or 0
    ctxs = ", ".join(str(c.context_tokens) for c in known)
    if context_tokens < lo_c * (1 - CONTEXT_SLACK) or context_tokens > hi_c * (1 + CONTEXT_SLACK):
        return DecodeReading(None, None, None,
                             f"measured at context {ctxs} only; the scenario decodes at context {context_tokens:.0f}, beyond "
                             f"±{CONTEXT_SLACK:.0%} of that — not applied (run the decode suite at that context)", tuple(known))
    x = min(max(context_tokens, lo_c), hi_c)
    below = [c for c in known if (c.context_tokens or 0) <= x][-1]
    above = [c for c in known if (c.context_tokens or 0) >= x][0]
    if below is above:
        held = "" if below.context_tokens == context_tokens else f", held from context {below.context_tokens}"
        return DecodeReading(below.at(batch, which), below.at(batch, "low"), below.at(batch, "high"),
                             f"context {context_tokens:.0f}{held}", (below,))
    f = (x - (below.context_tokens or 0)) / ((above.context_tokens or 0) - (below.context_tokens or 0))
    mix = lambda w: (1 - f) * below.at(batch, w) + f * above.at(batch, w)  # noqa: E731
    return DecodeReading(mix(which), mix("low"), mix("high"),
                         f"context {context_tokens:.0f}, interpolated between {below.context_tokens} and "
                         f"{above.context_tokens}", (below, above))


@dataclass(frozen=True)
class MeasuredConstants:
    """A calibration record as the model's `harness.model.calibration.Calibration` protocol."""

    record: CalibrationRecord
    path: str

    @property
    def source(self) -> str:
        return self.path

    @property
    def machine(self) -> str:
        return self.record.machine

    def with_proxy(self, proxy: dict[str, str]) -> "MeasuredConstants":
        return MeasuredConstants(replace(self.record, proxy={**self.record.proxy, **proxy}), self.path)

    def device_for(self, gpu: str) -> tuple[str, bool] | None:
        """(measured device, is a proxy) standing for scenario GPU `gpu`, or None."""
        if gpu in self.record.devices:
            return gpu, False
        if gpu in self.record.proxy and self.record.proxy[gpu] in self.record.devices:
            return self.record.proxy[gpu], True
        return None

    def curves(self, gpu: str, dtype: str) -> tuple[EfficiencyCurve | None, EfficiencyCurve | None, str | None, bool]:
        dev = self.device_for(gpu)
        if dev is None:
            return None, None, None, False
        got = [self.record.curve(dev[0], q, dtype) for q in ("prefill_compute_efficiency", "decode_bandwidth_efficiency")]
        got = [None if self.family_refused(gpu, dtype, c) else c for c in got]
        return got[0], got[1], dev[0], dev[1]

    def family_refused(self, gpu: str, dtype: str, curve: EfficiencyCurve | None) -> str | None:
        """Why `curve` is not applied to `gpu` running `dtype` kernels (another kernel family and no proxy), or None."""
        if curve is None:
            return None
        want = plan_family(dtype)
        told = gpu in self.record.proxy or gpu not in self.record.devices
        if curve.kernel_family == want or told or (is_engine_cuda_family(curve.kernel_family) and curve.dtype == dtype):
            return None
        return (f"measured with {curve.kernel_family} kernels, the plan runs {want}; not applied (name a proxy with "
                f"`harness calibrate --proxy {gpu}=<device>` to use it)")

    def _refused(self, gpu: str, dtype: str, dev: str | None, quantity: str) -> str | None:
        """Why the measured `quantity` curve of `dev` is not applied to `gpu` (family mismatch), or None."""
        return self.family_refused(gpu, dtype, self.record.curve(dev, quantity, dtype)) if dev else None

    def decode_curves(self, gpu: str, dtype: str) -> tuple[EfficiencyCurve, ...]:
        dev = self.device_for(gpu)
        if dev is None:
            return ()
        return tuple(c for c in self.record.curves_at_contexts(dev[0], "decode_bandwidth_efficiency", dtype)
                     if not self.family_refused(gpu, dtype, c))

    def efficiency(self, gpu: str, decode_batch: int, prefill_tokens: int, dtype: str, which: Which = "value",
                   decode_context_tokens: float | None = None) -> Efficiency | None:
        """Efficiency of `gpu` at the scenario's batch, decode context and prefill tokens, or None when nothing was measured."""
        pc, dc, dev, proxy = self.curves(gpu, dtype)
        if pc is None and dc is None:
            return None
        where = f"{self.path}" + (f", proxy: measured on {dev}" if proxy else "")
        compute, c_part = _measured_or_default(pc, prefill_tokens, which, "compute", "tokens/GPU")
        reading = read_decode_curves(self.decode_curves(gpu, dtype), decode_batch, decode_context_tokens, which)
        if reading.value is None:
            bandwidth = DEFAULT_EFFICIENCY
            b_part = ("bandwidth datasheet default 50%" if dc is None
                      else f"bandwidth datasheet default 50% (decode MBU {reading.label})")
        else:
            bandwidth = _clamp(reading.value)
            c0 = reading.curves[0]
            held = "" if all(c.in_range(decode_batch) for c in reading.curves) else ", end value held outside the measured range"
            b_part = f"bandwidth measured {bandwidth:.0%} at batch {decode_batch}, {reading.label} ({c0.dtype}{held})"
        tag = "" if which == "value" else f" [{which} end of 95% interval]"
        return Efficiency(compute, bandwidth, f"{c_part}; {b_part}; {where}{tag}")

    def collective(self, op: str, num_gpus: int, implementation: str | None = None) -> CollectiveFit | None:
        """The fitted collective (`op` at `num_gpus`, e.g. "all_reduce" at 8), of `implementation` when given, else the
        fastest at 1 MiB; `fit.time_s(size_bytes)` reads its measured time at a message size."""
        return self.record.collective(op, num_gpus, implementation)

    def link_fit(self, name: str | None) -> tuple[LinkFit, bool] | None:
        found = self.link_choice(name)
        return None if found is None else (found[0], found[1])

    def link_choice(self, name: str | None) -> tuple[LinkFit, bool, str] | None:
        """(fit, is a proxy, why this fit) for link `name`: pinned host memory over pageable, then the slower direction."""
        if not name:
            return None
        target = self.record.proxy.get(name)
        for want, proxy in ((name, False), (target, True)):
            if not want:
                continue
            cands = [lf for lf in self.record.links if want in (lf.key, lf.link, f"{lf.link}:{lf.direction}")]
            if not cands:
                continue
            exact = [lf for lf in cands if lf.key == want]
            if exact:
                return exact[0], proxy, "named exactly"
            why = []
            if len({lf.method for lf in cands}) > 1:
                # the transfer model's α is a waited-on copy engine transfer (microbench.transfer.MODEL_ALPHA)
                model = [lf for lf in cands if lf.method == MODEL_METHOD]
                if model:
                    cands = model
                    why.append(f"the {MODEL_METHOD} fit (a KV hand-off is waited on) over the other copy methods")
            pinned = [lf for lf in cands if lf.memory == "pinned"]
            if pinned and len(pinned) < len(cands):
                # engines stage KV hand-offs through pinned buffers; pageable copies are a slower fallback
                cands = pinned
                why.append("pinned host memory preferred over pageable")
            if len({lf.direction for lf in cands}) > 1:
                why.append("the slower direction bounds a hand-off")
            pick = min(cands, key=lambda lf: lf.bandwidth_bytes_per_s.value)
            return pick, proxy, "; ".join(why) or "the only fit"
        return None

    def link(self, name: str | None, which: Which = "value") -> LinkConstants | None:
        """The link `name` as fitted (bandwidth, startup latency, label), or None."""
        found = self.link_choice(name)
        if found is None:
            return None
        lf, proxy, why = found
        bw = lf.bandwidth_bytes_per_s.pick({"value": "value", "low": "low", "high": "high"}[which])
        alpha = lf.alpha_s.pick({"value": "value", "low": "high", "high": "low"}[which])
        label = f"{name} (measured {lf.key}" + (", proxy" if proxy else "") + f"; {why})"
        return LinkConstants(bw, alpha, label)

    def provenance(self, gpus: list[str], link_name: str | None, decode_batch: int, prefill_tokens: int,
                   dtype: str, link_default: LinkConstants | None,
                   decode_context_tokens: float | None = None) -> list[ConstantProvenance]:
        """One row per constant the plan uses: value, interval, and whether measured or a datasheet default."""
        rows: list[ConstantProvenance] = []

        def default(name: str, why: str = "Chapter 9, §9.2.3: 50% of peak", refused: str | None = None) -> ConstantProvenance:
            return ConstantProvenance(constant=name, origin="datasheet default" + (f" ({refused})" if refused else ""),
                                      value=DEFAULT_EFFICIENCY, low=None, high=None, at=None, source=why, run_ids=())

        for g in gpus:
            pc, dc, dev, proxy = self.curves(g, dtype)
            origin = "measured (proxy: " + str(dev) + ")" if proxy else "measured"
            if pc is None:
                rows.append(default(f"{g}.compute_efficiency", refused=self._refused(g, dtype, dev, "prefill_compute_efficiency")))
            else:
                rows.append(ConstantProvenance(
                    constant=f"{g}.compute_efficiency", origin=origin, value=_clamp(pc.at(prefill_tokens)),
                    low=_clamp(pc.at(prefill_tokens, "low")), high=_clamp(pc.at(prefill_tokens, "high")),
                    at={"tokens_per_gpu": prefill_tokens},
                    source=f"{self.path}: {pc.quantity} on {pc.device} ({pc.dtype}, {pc.backend})", run_ids=tuple(pc.run_ids),
                    family=pc.kernel_family))
            reading = read_decode_curves(self.decode_curves(g, dtype), decode_batch, decode_context_tokens)
            if dc is None:
                rows.append(default(f"{g}.bandwidth_efficiency", refused=self._refused(g, dtype, dev, "decode_bandwidth_efficiency")))
            elif reading.value is None:
                rows.append(default(f"{g}.bandwidth_efficiency", f"Chapter 9, §9.2.3: 50% of peak; decode MBU {reading.label}"))
            else:
                at: dict[str, float] = {"batch": decode_batch}
                if decode_context_tokens is not None:
                    at["context_tokens"] = decode_context_tokens
                c0 = reading.curves[0]
                rows.append(ConstantProvenance(
                    constant=f"{g}.bandwidth_efficiency", origin=origin, value=_clamp(reading.value),
                    low=_clamp(reading.low or 0.0), high=_clamp(reading.high or 0.0), at=at,
                    source=f"{self.path}: {c0.quantity} on {c0.device} ({c0.dtype}, {c0.backend}; {reading.label})",
                    run_ids=tuple(sorted({r for c in reading.curves for r in c.run_ids})), family=c0.kernel_family))
        found = self.link_choice(link_name)
        if link_name is not None:
            if found is None:
                bw = link_default.bandwidth_bytes_per_s if link_default else None
                alpha = link_default.startup_latency_s if link_default else None
                for what, v in (("bandwidth_bytes_per_s", bw), ("startup_latency_s", alpha)):
                    rows.append(ConstantProvenance(constant=f"link.{link_name}.{what}", origin="datasheet default", value=v,
                                                   low=None, high=None, at=None, source="link spec catalog", run_ids=()))
            else:
                lf, proxy, why = found
                origin = f"measured (proxy: {lf.key})" if proxy else "measured"
                for what, est in (("bandwidth_bytes_per_s", lf.bandwidth_bytes_per_s), ("startup_latency_s", lf.alpha_s)):
                    rows.append(ConstantProvenance(constant=f"link.{link_name}.{what}", origin=origin, value=est.value,
                                                   low=est.low, high=est.high, at=None,
                                                   source=f"{self.path}: {est.method} ({lf.key}; {why})",
                                                   run_ids=tuple(est.run_ids)))
        return rows


def plan_family(dtype: str) -> str:
    """The kernel family a scenario GPU runs at `dtype` (catalog GPUs are CUDA devices)."""
    return f"cuda-{dtype}"


def _measured_or_default(curve, x, which: str, name: str, x_label: str) -> tuple[float, str]:
    """The curve's value at x (clamped to a fraction of peak) and how it was obtained, or the 50 % default."""
    if curve is None:
        return DEFAULT_EFFICIENCY, f"{name} datasheet default 50%"
    v = _clamp(curve.at(x, which))
    at = f"{x} {x_label}" if x_label == "tokens/GPU" else f"{x_label} {x}"
    held = "" if curve.in_range(x) else ", end value held outside the measured range"
    return v, f"{name} measured {v:.0%} at {at} ({curve.dtype}{held})"
