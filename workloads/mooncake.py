"""Mooncake trace reader: JSON lines of timestamp (ms), input_length, output_length, hash_ids.

Each hash id names one block of BLOCK_TOKENS prompt tokens; requests that share leading hash ids
share that prompt prefix. Replay expands every id into a deterministic block of text (the same id
always gives the same text), so prefix reuse in the trace becomes prefix reuse at the server.
The committed sample (workloads/traces/mooncake-sample.jsonl) is synthetic, in the trace's format.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.specs.limits import MAX_CONTEXT_SOURCE, MAX_CONTEXT_TOKENS
from workloads.prompts import TokenizerText, prompt_text

BLOCK_TOKENS = 512
MAX_TIMESTAMP_MS = 365 * 86400 * 1000.0  # a trace spans at most a year of arrivals
MAX_HASH_ID = 2**63 - 1
SAMPLE_TRACE = Path(__file__).resolve().parent / "traces" / "mooncake-sample.jsonl"


@dataclass(frozen=True)
class TraceRequest:
    timestamp_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]

    def to_dict(self) -> dict:
        return {"timestamp_s": self.timestamp_s, "input_length": self.input_length, "output_length": self.output_length,
                "hash_ids": list(self.hash_ids)}


def _int(path: Path, line: int, rec: dict, name: str, low: int) -> int:
    v = rec.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise HarnessError(f"{path}:{line}: {name} must be an integer >= {low}, got {v!r}; fix the trace line.")
    if v > MAX_CONTEXT_TOKENS:
        raise HarnessError(f"{path}:{line}: {name} = {v} tokens is above {MAX_CONTEXT_TOKENS}, {MAX_CONTEXT_SOURCE}; "
                           "fix the trace line.")
    return v


def read_trace(path: str | Path, max_requests: int | None = None) -> list[TraceRequest]:
    """Parse a Mooncake JSONL trace; every bad line is named with its number and field."""
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"trace file {str(p)!r} does not exist; give a Mooncake JSONL trace (sample: {SAMPLE_TRACE}).")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"trace {p} is not UTF-8 text (byte {exc.start}: {exc.reason}); it is binary or compressed: "
                           "give the JSONL trace itself (decompress it first).") from None
    except OSError as exc:
        raise HarnessError(f"trace {p} cannot be read ({exc}).") from None
    out: list[TraceRequest] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{p}:{n}: not valid JSON ({exc}); each line must be one JSON object.") from None
        if not isinstance(rec, dict):
            raise HarnessError(f"{p}:{n}: expected a JSON object, got {type(rec).__name__}.")
        ts = rec.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0 or ts > MAX_TIMESTAMP_MS:
            raise HarnessError(f"{p}:{n}: timestamp must be a number of milliseconds from 0 to {MAX_TIMESTAMP_MS:g} "
                               f"(one year), got {ts!r}.")
        inp = _int(p, n, rec, "input_length", 1)
        outl = _int(p, n, rec, "output_length", 1)
        ids = rec.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_HASH_ID
                                                for h in ids):
            shown = repr(ids) if len(repr(ids)) < 120 else repr(ids)[:117] + "..."
            raise HarnessError(f"{p}:{n}: hash_ids must be a list of integers from 0 to 2**63-1 (block ids), got {shown}.")
        if len(ids) * BLOCK_TOKENS < inp - BLOCK_TOKENS + 1 and ids:
            raise HarnessError(f"{p}:{n}: {len(ids)} hash_ids cover at most {len(ids) * BLOCK_TOKENS} tokens but input_length is {inp}.")
        out.append(TraceRequest(float(ts) / 1000.0, inp, outl, tuple(ids)))
        if max_requests is not None and len(out) >= max_requests:
            break
    if not out:
        raise HarnessError(f"trace {p} has no requests.")
    return out


def expand_prompt(req: TraceRequest, tokenizer: TokenizerText | None = None, seed: int = 0) -> str:
    """Concatenate the blocks named by hash_ids (the last one cut to fit input_length)."""
    if not req.hash_ids:
        return prompt_text(req.input_length, seed, tokenizer)
    parts = []
    left = req.input_length
    for h in req.hash_ids:
        if left <= 0:
            break
        n = min(BLOCK_TOKENS, left)
        parts.append(prompt_text(n, 1_000_003 * (h + 1) + (0 if n == BLOCK_TOKENS else n), tokenizer))
        left -= n
    if left > 0:  # trace gave fewer blocks than tokens: the tail is unshared
        parts.append(prompt_text(left, seed, tokenizer))
    return " ".join(parts)
