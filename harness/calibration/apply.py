"""Measured constants as the model uses them: efficiency at a scenario's batch and tokens, a fitted link.

Chapter 9, §9.2.3: the decode stage runs at the bandwidth efficiency of its batch (the chapter
reads ≈49 % at batch 32 off the 33 %→65 % curve) and the prefill stage at the compute efficiency
of its tokens per GPU (58–62 %). A scenario GPU uses the curves measured on that GPU, or on the
device the calibration's `proxy` names for it (the chapter itself applied RTX PRO 6000 curves to
A100 and H20); anything not measured stays at the datasheet default, and every figure says which.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.calibration.record import CalibrationRecord, EfficiencyCurve, LinkFit, Which
from harness.model.calibration import ConstantProvenance, LinkConstants
from harness.model.stages import Efficiency

DEFAULT_EFFICIENCY = 0.5


def _clamp(x: float) -> float:
    return min(1.0, max(1e-6, x))


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
        return (self.record.curve(dev[0], "prefill_compute_efficiency", dtype),
                self.record.curve(dev[0], "decode_bandwidth_efficiency", dtype), dev[0], dev[1])

    def efficiency(self, gpu: str, decode_batch: int, prefill_tokens: int, dtype: str, which: Which = "value") -> Efficiency | None:
        """Efficiency of `gpu` at the scenario's batch and prefill tokens, or None when nothing was measured."""
        pc, dc, dev, proxy = self.curves(gpu, dtype)
        if pc is None and dc is None:
            return None
        where = f"{self.path}" + (f", proxy: measured on {dev}" if proxy else "")
        compute, c_part = _measured_or_default(pc, prefill_tokens, which, "compute", "tokens/GPU")
        bandwidth, b_part = _measured_or_default(dc, decode_batch, which, "bandwidth", "batch")
        parts = [c_part, b_part]
        tag = "" if which == "value" else f" [{which} end of 95% interval]"
        return Efficiency(compute, bandwidth, f"{'; '.join(parts)}; {where}{tag}")

    def link_fit(self, name: str | None) -> tuple[LinkFit, bool] | None:
        if not name:
            return None
        target = self.record.proxy.get(name)
        for want, proxy in ((name, False), (target, True)):
            if not want:
                continue
            cands = [lf for lf in self.record.links if want in (lf.key, lf.link, f"{lf.link}:{lf.direction}")]
            if cands:  # several directions: the slowest carries the hand-off bound
                return min(cands, key=lambda lf: lf.bandwidth_bytes_per_s.value), proxy
        return None

    def link(self, name: str | None, which: Which = "value") -> LinkConstants | None:
        """The link `name` as fitted (bandwidth, startup latency, label), or None."""
        found = self.link_fit(name)
        if found is None:
            return None
        lf, proxy = found
        bw = lf.bandwidth_bytes_per_s.pick({"value": "value", "low": "low", "high": "high"}[which])
        alpha = lf.alpha_s.pick({"value": "value", "low": "high", "high": "low"}[which])
        label = f"{name} (measured {lf.key}" + (", proxy" if proxy else "") + ")"
        return LinkConstants(bw, alpha, label)

    def provenance(self, gpus: list[str], link_name: str | None, decode_batch: int, prefill_tokens: int,
                   dtype: str, link_default: LinkConstants | None) -> list[ConstantProvenance]:
        """One row per constant the plan uses: value, interval, and whether measured or a datasheet default."""
        rows: list[ConstantProvenance] = []
        for g in gpus:
            pc, dc, dev, proxy = self.curves(g, dtype)
            for name, curve, x, label in (("compute_efficiency", pc, prefill_tokens, "tokens_per_gpu"),
                                          ("bandwidth_efficiency", dc, decode_batch, "batch")):
                if curve is None:
                    rows.append(ConstantProvenance(constant=f"{g}.{name}", origin="datasheet default", value=DEFAULT_EFFICIENCY,
                                                   low=None, high=None, at=None, source="Chapter 9, §9.2.3: 50% of peak",
                                                   run_ids=()))
                else:
                    rows.append(ConstantProvenance(
                        constant=f"{g}.{name}", origin="measured (proxy: " + str(dev) + ")" if proxy else "measured",
                        value=_clamp(curve.at(x)), low=_clamp(curve.at(x, "low")), high=_clamp(curve.at(x, "high")),
                        at={label: x}, source=f"{self.path}: {curve.quantity} on {curve.device} ({curve.dtype}, "
                                              f"{curve.backend})", run_ids=tuple(curve.run_ids),
                    ))
        found = self.link_fit(link_name)
        if link_name is not None:
            if found is None:
                bw = link_default.bandwidth_bytes_per_s if link_default else None
                alpha = link_default.startup_latency_s if link_default else None
                for what, v in (("bandwidth_bytes_per_s", bw), ("startup_latency_s", alpha)):
                    rows.append(ConstantProvenance(constant=f"link.{link_name}.{what}", origin="datasheet default", value=v,
                                                   low=None, high=None, at=None, source="link spec catalog", run_ids=()))
            else:
                lf, proxy = found
                origin = f"measured (proxy: {lf.key})" if proxy else "measured"
                for what, est in (("bandwidth_bytes_per_s", lf.bandwidth_bytes_per_s), ("startup_latency_s", lf.alpha_s)):
                    rows.append(ConstantProvenance(constant=f"link.{link_name}.{what}", origin=origin, value=est.value,
                                                   low=est.low, high=est.high, at=None,
                                                   source=f"{self.path}: {est.method} ({lf.key})", run_ids=tuple(est.run_ids)))
        return rows


def _measured_or_default(curve, x, which: str, name: str, x_label: str) -> tuple[float, str]:
    """The curve's value at x (clamped to a fraction of peak) and how it was obtained, or the 50 % default."""
    if curve is None:
        return DEFAULT_EFFICIENCY, f"{name} datasheet default 50%"
    v = _clamp(curve.at(x, which))
    at = f"{x} {x_label}" if x_label == "tokens/GPU" else f"{x_label} {x}"
    held = "" if curve.in_range(x) else ", end value held outside the measured range"
    return v, f"{name} measured {v:.0%} at {at} ({curve.dtype}{held})"
