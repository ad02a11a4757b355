"""Which runs are compared with which: runs of the same workload artifact and scenario, baseline first.

Runs are grouped by (kind, workload artifact hash, scenario). Within a group the first run given is
the baseline and every later run a candidate against it, so `A B` compares B with A and
`A@r1 A@r2 B@r1 B@r2` (a rate sweep) pairs each rate with itself. A run that shares its group with
no other run is refused with the reason (which artifact or scenario differs from which run) unless
`force`, which compares every run with the first one given. Runs of different kinds (a load run
and a micro run) are never compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.compare.runs import RunData
from harness.errors import HarnessError


@dataclass(frozen=True)
class Pair:
    baseline: RunData
    candidate: RunData
    forced_reasons: tuple[str, ...] = ()  # what differs, when --force made the comparison anyway


def _key(r: RunData) -> tuple:
    return (r.kind, r.workload_hash, r.scenario)


def differences(a: RunData, b: RunData) -> list[str]:
    """Why a and b are not runs of the same workload: each differing fact with both values."""
    out = []
    if a.workload_hash != b.workload_hash:
        out.append(f"workload artifact differs: {a.run_id} ran {a.workload_name or '?'} {str(a.workload_hash)[:12]}, "
                   f"{b.run_id} ran {b.workload_name or '?'} {str(b.workload_hash)[:12]}")
    if a.scenario != b.scenario:
        out.append(f"scenario differs: {a.run_id} has {a.scenario!r}, {b.run_id} has {b.scenario!r}")
    return out


def pair_runs(runs: list[RunData], force: bool = False) -> list[Pair]:
    if len(runs) < 2:
        raise HarnessError(f"compare needs at least two runs (a baseline and a candidate), got {len(runs)}.")
    kinds = sorted({r.kind for r in runs})
    if len(kinds) > 1:
        listing = ", ".join(f"{r.run_id} ({r.kind})" for r in runs)
        raise HarnessError(f"runs of different kinds cannot be compared ({listing}); give only load runs or only micro runs.")
    seen_ids: set[str] = set()
    for r in runs:
        if r.path in seen_ids:
            raise HarnessError(f"run {r.path} is given twice; give each run once.")
        seen_ids.add(r.path)
    if runs[0].kind == "load":
        missing = [r.run_id for r in runs if not r.workload_hash]
        if missing and not force:
            raise HarnessError(f"run(s) {', '.join(missing)} record no workload artifact hash, so it cannot be shown that they "
                               "ran the same requests; rerun them with this harness, or pass --force to compare anyway.")
    groups: dict[tuple, list[RunData]] = {}
    for r in runs:
        groups.setdefault(_key(r), []).append(r)
    lonely = [g[0] for g in groups.values() if len(g) == 1]
    if lonely and not force:
        ref = runs[0]
        reasons = []
        for r in lonely:
            reasons += differences(ref, r) if r is not ref else differences(ref, runs[1])
        raise HarnessError(
            "these runs are not of the same workload, so a difference between them says nothing about the engine: "
            + "; ".join(dict.fromkeys(reasons)) + ". Compare runs of one workload artifact (harness compare-engines replays "
            "one artifact against both targets, bench-pd --workload FILE replays a saved one), or pass --force to compare anyway."
        )
    if force and lonely:
        base = runs[0]
        return [Pair(base, r, tuple(differences(base, r))) for r in runs[1:]]
    pairs = []
    for g in groups.values():
        pairs += [Pair(g[0], r) for r in g[1:]]
    return pairs
