"""The chapter's conclusions about the heterogeneous PD cluster, re-evaluated on two plans.

Chapter 9, example 9.2, §9.6.1 and example 9.8 (4×A100 + 4×H20, 3.5 req/s, 25 GB/s link, 10 s
startup, 60 s deadline). Each conclusion is a test on a plan (`harness.model.plan.plan` output);
it is evaluated under the datasheet defaults and under the calibrated constants, with the
chapter's printed figure alongside.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Callable

from harness.model.capacity import PdAllocation
from harness.model.plan_records import Plan
from harness.units import fmt_num


@dataclass(frozen=True)
class Conclusion:
    claim: str
    source: str
    chapter: str  # the chapter's figure, as printed
    datasheet: str  # this harness at datasheet defaults
    calibrated: str  # with the calibrated constants
    holds_datasheet: bool | None
    holds_calibrated: bool | None

    @property
    def changed(self) -> bool:
        return self.holds_datasheet != self.holds_calibrated

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}


def _alloc(a: Mapping[str, int]) -> str:
    return " + ".join(f"{n}×{g}" for g, n in a.items() if n) or "none"


def _clear(x: float | None) -> str:
    return fmt_num(x, ".1f", suffix=" s", missing="never")


def _ref(plan: Plan, name: str) -> PdAllocation | None:
    return plan.pd.references.get(name) if plan.pd else None


def _interval(plan: Plan, key: str, fmt: str = "{:.2f}") -> str:
    ci = getattr(plan.calibration.capacity_interval, key) if plan.calibration else None
    if ci is None or ci.low is None or ci.high is None:
        return ""
    return f" [{fmt.format(ci.low)}, {fmt.format(ci.high)}]"


Check = Callable[[Plan], tuple[str, bool | None]]


def _checks(lam: float, deadline: float | None) -> list[tuple[str, str, str, Check]]:
    def colocated(p: Plan):
        mu = p.colocated.requests_per_s
        return f"{mu:.2f} req/s" + _interval(p, "colocated_requests_per_s"), mu < lam

    def pd_exceeds(p: Plan):
        r = _ref(p, "example-9.2")
        if r is None:
            return "n/a", None
        return f"{r.requests_per_s:.2f} req/s", r.requests_per_s > lam

    def best(p: Plan):
        r, b = _ref(p, "example-9.2"), (p.pd.best if p.pd else None)
        if r is None or b is None:
            return "n/a", None
        tied = r.requests_per_s >= b.requests_per_s * (1 - 1e-6)
        return (f"best: P {_alloc(b.prefill)} / D {_alloc(b.decode)}, {b.requests_per_s:.2f} req/s"
                + _interval(p, "pd_best_requests_per_s")), tied

    def pd_clears(p: Plan):
        d = p.drain.get("pd:example-9.2") or p.drain.get("pd")
        if d is None or deadline is None:
            return "n/a", None
        s = _clear(d.clear_at_s) if "pd:example-9.2" in p.drain else _clear(d.clear_at_s) + " (best split)"
        return s, d.clear_at_s is not None and d.clear_at_s <= deadline

    def chunked(p: Plan):
        mu = p.chunked_colocated.requests_per_s
        r = _ref(p, "example-9.2")
        clear = p.drain["chunked_colocated"].clear_at_s
        if r is None or deadline is None:
            return "n/a", None
        return (f"{mu:.2f} req/s, clears {_clear(clear)}" + _interval(p, "chunked_colocated_requests_per_s"),
                mu < r.requests_per_s and (clear is None or clear > deadline))

    def reversed_roles(p: Plan):
        r, rev = _ref(p, "example-9.2"), _ref(p, "reversed-roles")
        if r is None or rev is None:
            return "n/a", None
        return f"{rev.requests_per_s:.2f} req/s", rev.requests_per_s < 0.5 * r.requests_per_s

    def link(p: Plan):
        b = p.pd.best if p.pd else None
        if b is None or math.isinf(b.link_requests_per_s):
            return "n/a", None
        return f"{b.link_requests_per_s:.1f} states/s", b.link_requests_per_s > b.requests_per_s

    def sens(p: Plan):
        e = p.sensitivity.efficiency_scale.get("0.9")
        if e is None or deadline is None or e.pd is None or "example-9.2" not in e.pd.references:
            return "n/a", None
        r = e.pd.references["example-9.2"]
        return f"{r.allocation.requests_per_s:.2f} req/s, clears {_clear(r.clear_at_s)}", (
            r.clear_at_s is None or r.clear_at_s > deadline)

    dl = f"{deadline:g} s" if deadline else "the deadline"
    return [
        ("Colocated replicas of all GPUs fall short of the arrival rate", "§9.2.3, example 9.2", "3.02 < 3.5 req/s", colocated),
        ("4 A100 → P / 4 H20 → D exceeds the arrival rate", "example 9.2", "4.55 > 3.5 req/s", pd_exceeds),
        ("4 A100 → P / 4 H20 → D is the best allocation", "example 9.2, Fig. 9-10", "best, 4.55 req/s", best),
        (f"PD clears the startup backlog by {dl}", "§9.6.1, Fig. 9-42", "43 s ≤ 60 s", pd_clears),
        (f"Ideal chunked colocation stays below PD and misses {dl}", "§9.2.3, §9.6.1", "4.17 req/s, 63 s", chunked),
        ("Swapping the roles (H20 → P) gives less than half", "example 9.2", "2.22 req/s", reversed_roles),
        ("The link is not the bottleneck", "example 9.2", "20.7 states/s ≫ 4.55", link),
        (f"At 90% of the assumed efficiency PD misses {dl}", "§9.7.2", "4.10 req/s, 68.5 s", sens),
    ]


def evaluate(datasheet_plan: Plan, calibrated_plan: Plan) -> list[Conclusion]:
    """Each conclusion under both plans (same scenario)."""
    lam = datasheet_plan.workload.arrival_rate_per_s
    deadline = datasheet_plan.startup.deadline_s
    out = []
    for claim, source, chapter, check in _checks(lam, deadline):
        dv, dh = check(datasheet_plan)
        cv, ch = check(calibrated_plan)
        out.append(Conclusion(claim, source, chapter, dv, cv, dh, ch))
    return out
