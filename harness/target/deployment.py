"""The deployment the embedded target emulates, built from a scenario: pools, PD allocation, link.

Chapter 9, §9.2.3 example 9.2: by default the allocation is the model's best one (4 A100 in P,
4 H20 in D for the chapter's scenario); a named reference allocation or colocated replicas can be
chosen instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import HarnessError
from harness.model.plan import efficiency_for, plan, workload_of
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model
from harness.specs.scenario import Scenario
from harness.target.service_times import GpuServiceModel

Mode = Literal["pd", "colocated"]


@dataclass(frozen=True)
class EmulatedDeployment:
    scenario: str
    model: str
    mode: Mode
    prefill_gpus: tuple[str, ...]  # one entry per GPU instance (empty when colocated)
    decode_gpus: tuple[str, ...]
    colocated_gpus: tuple[str, ...]
    decode_batch: int
    link_bandwidth_bytes_per_s: float | None
    link_startup_latency_s: float
    startup_s: float
    allocation: str  # "best", a reference allocation name, or "colocated"
    services: dict[str, GpuServiceModel] = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulated": True,
            "scenario": self.scenario,
            "model": self.model,
            "mode": self.mode,
            "allocation": self.allocation,
            "prefill_gpus": list(self.prefill_gpus),
            "decode_gpus": list(self.decode_gpus),
            "colocated_gpus": list(self.colocated_gpus),
            "decode_batch": self.decode_batch,
            "link_bandwidth_bytes_per_s": self.link_bandwidth_bytes_per_s,
            "link_startup_latency_s": self.link_startup_latency_s,
            "startup_s": self.startup_s,
        }


def _expand(counts: dict[str, int]) -> tuple[str, ...]:
    return tuple(g for g, n in counts.items() for _ in range(n))


def deployment_from_scenario(
    s: Scenario, *, allocation: str = "best", mode: Mode | None = None, startup_s: float | None = None
) -> EmulatedDeployment:
    """Pools and link of `s`; `allocation` is "best" (the model's optimum) or a reference allocation name."""
    model = get_model(s.workload.model)
    work = workload_of(s)
    services = {
        p.gpu: GpuServiceModel(get_gpu(p.gpu), model, efficiency_for(s, p.gpu), work.weight_bytes_per_param, work.kv_bytes_per_elem)
        for p in s.pools
    }
    total = sum(p.count for p in s.pools)
    if mode is None:
        mode = "pd" if total >= 2 and s.link is not None else "colocated"
    if mode not in ("pd", "colocated"):
        raise HarnessError(f"target mode must be 'pd' or 'colocated', got {mode!r}.")
    st = s.startup.startup_s if startup_s is None else startup_s
    if st < 0:
        raise HarnessError(f"startup_s must be >= 0, got {st!r}.")
    common = dict(
        scenario=s.name, model=model.name, decode_batch=s.workload.decode_batch, startup_s=float(st), services=services,
        link_bandwidth_bytes_per_s=s.link.bandwidth if s.link else None,
        link_startup_latency_s=s.link.startup if s.link else 0.0,
    )
    if mode == "colocated":
        gpus = _expand({p.gpu: p.count for p in s.pools})
        return EmulatedDeployment(mode="colocated", prefill_gpus=(), decode_gpus=(), colocated_gpus=gpus, allocation="colocated", **common)
    if total < 2:
        raise HarnessError(f"scenario {s.name!r} has {total} GPU; a PD deployment needs at least 2 (use mode 'colocated').")
    if s.link is None:
        raise HarnessError(f"scenario {s.name!r} has no [link] section; a PD deployment needs one (add link.spec or use mode 'colocated').")
    counts = {p.gpu: p.count for p in s.pools}
    if allocation == "best":
        pd = plan(s, include_grid=False).pd
        if pd is None:
            raise HarnessError(f"scenario {s.name!r} has no PD split (one output token means no decode calls); use mode 'colocated'.")
        prefill = dict(pd.best.prefill)
    else:
        refs = {r.name: r.prefill for r in s.reference_allocations}
        if allocation not in refs:
            raise HarnessError(
                f"allocation {allocation!r} is not in scenario {s.name!r}; give 'best' or one of: {', '.join(refs) or '(none defined)'}."
            )
        prefill = {g: refs[allocation].get(g, 0) for g in counts}
    decode = {g: counts[g] - prefill.get(g, 0) for g in counts}
    if sum(prefill.values()) == 0 or sum(decode.values()) == 0:
        raise HarnessError(f"allocation {allocation!r} leaves the P or the D pool empty ({prefill} in P); pick another allocation.")
    return EmulatedDeployment(mode="pd", prefill_gpus=_expand(prefill), decode_gpus=_expand(decode), colocated_gpus=(), allocation=allocation, **common)
