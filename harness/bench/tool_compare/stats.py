"""Best and median per tool, and ours / best other tool (best vs best, median vs median, per round)."""

from __future__ import annotations

import statistics
from typing import Any


def best_median(values: list[float]) -> dict[str, float | None]:
    return {"best": max(values) if values else None, "median": statistics.median(values) if values else None,
            "n": len(values)}


def ratios(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """ours / best other tool on `key` (a tokens-per-CPU-second figure): best vs best, median vs median, per round."""
    by_tool: dict[str, list[float]] = {}
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        v = r.get(key)
        if v is None:
            continue
        by_tool.setdefault(r["tool"], []).append(v)
        by_round.setdefault(r["round"], {})[r["tool"]] = v
    stats = {t: best_median(v) for t, v in by_tool.items()}
    others = [t for t in stats if t != "ours"]
    out: dict[str, Any] = {"per_tool": stats}
    if "ours" not in stats or not others:
        return out
    for which in ("best", "median"):
        other = max(others, key=lambda t: stats[t][which])
        out[f"{which}_vs_{which}"] = {"ratio": stats["ours"][which] / stats[other][which], "vs": other}
    per_round = {}
    for rnd, vals in sorted(by_round.items()):
        o = [(v, t) for t, v in vals.items() if t != "ours"]
        if "ours" in vals and o:
            v, t = max(o)
            per_round[str(rnd)] = {"ratio": vals["ours"] / v, "vs": t}
    out["per_round"] = per_round
    return out


def light_ttft(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """--mode light: per tool, the median over its runs of client − server TTFT p50 / p90 / p99 (ms), matched by
    response id where the tool records one, else by quantile (the record says which)."""
    out: dict[str, Any] = {}
    for r in runs:
        lt = r.get("light")
        if not lt:
            continue
        how = "matched_ms" if "matched_ms" in lt else "by_quantile_ms"
        t = out.setdefault(r["tool"], {"pairing": how, "runs": 0, **{q: [] for q in ("p50", "p90", "p99")}})
        t["runs"] += 1
        for q in ("p50", "p90", "p99"):
            if q in lt.get(how, {}):
                t[q].append(lt[how][q])
    for t in out.values():
        for q in ("p50", "p90", "p99"):
            t[q] = statistics.median(t[q]) if t[q] else None
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if not r["problems"]]
    light = light_ttft(ok)
    return {**({"light_client_minus_server_ttft_ms": light} if light else {}),"load_window": ratios(ok, "tokens_per_cpu_s_load_window"),
            "whole_command": ratios(ok, "tokens_per_cpu_s_whole_command"),
            "runs_left_out": [f"round {r['round']} {r['tool']}: {r['problems']}" for r in runs if r["problems"]]}
