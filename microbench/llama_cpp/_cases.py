"""Shared pieces of the llama.cpp backends: the case record, measurements of repeated tool runs, the peak note."""

from __future__ import annotations

import json
from typing import Any

from harness.errors import HarnessError
from harness.importers import external_measurement
from microbench.case import CaseResult, Peak, Work

PEAK_NOTE = ("llama.cpp tools: no spec peak applied (the CPU spec catalog has no integer-dot peak); rates are "
             "achieved values, compared with the calibrated constants, not fractions of a datasheet")


def measurement(tool: str, samples_s: list[float]):
    """A Measurement from the per-repetition times a tool reported (each a mean over the tool's own inner runs)."""
    if not samples_s:
        raise HarnessError(f"{tool}: no timed repetitions to record.")
    if any(not (s > 0) for s in samples_s):
        raise HarnessError(f"{tool}: a repetition reported a non-positive time ({samples_s}); the output is damaged.")
    ordered = sorted(samples_s)
    return external_measurement(tool, ordered[len(ordered) // 2] if len(ordered) % 2 else
                                (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2, samples=list(samples_s))


def case(suite: str, name: str, tool: str, dtype: str, params: dict[str, Any], samples_s: list[float],
         flops: float = 0.0, nbytes: float = 0.0, notes: tuple[str, ...] = ()):
    # the ggml backend the case ran on: its own field, else its family's suffix (ggml-<type>-<backend>)
    backend = str(params.get("backend") or str(params.get("family") or "cpu").rsplit("-", 1)[-1])
    return CaseResult(suite, name, tool, backend, dtype,
                      params, Work(useful_flops=float(flops), useful_bytes=float(nbytes)), measurement(tool, samples_s),
                      Peak(None, None, PEAK_NOTE), notes=notes, source=tool)


def json_lines(text: str, must_have: str, tool: str) -> list[dict[str, Any]]:
    """The JSON objects printed one per line (other log lines ignored); each must have key `must_have`."""
    rows = []
    for ln in text.splitlines():
        s = ln.strip()
        if not (s.startswith("{") and s.endswith("}")):
            continue
        try:
            d = json.loads(s)
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{tool}: an output line is not valid JSON ({exc}): {s[:120]!r}") from None
        if isinstance(d, dict) and must_have in d:
            rows.append(d)
    return rows
