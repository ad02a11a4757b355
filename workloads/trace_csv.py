"""CSV request traces of production LLM services: BurstGPT and the Azure LLM inference traces (2023, 2024).

Formats, as published (sources named in tests/data/README.md):
  BurstGPT (HPMLL/BurstGPT, data/BurstGPT_*.csv): `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`;
      Timestamp in seconds from the trace's first day; rows with 0 response tokens are failed requests (the
      `BurstGPT_without_fails_*` files leave them out).
  Azure (Azure/AzurePublicDataset, AzureLLMInferenceTrace_{code,conv}.csv of 2023 and *_1week.csv of 2024):
      `TIMESTAMP,ContextTokens,GeneratedTokens`; TIMESTAMP a date and time, 2023 `2023-11-16 18:17:03.9799600`
      (7 fractional digits, no zone), 2024 `2024-05-10 00:00:00.009930+00:00` (and `...00:00:00+00:00` when the
      fraction is zero).
Only the arrival time and the two token counts are read; the other columns are left alone. A request with no
input or no output tokens cannot be sent (a prompt of 0 tokens, max_tokens 0): it is skipped and counted.
Reading stops once past `until_s` (trace seconds from its first request) when the file is in time order, so a
window near the start of a 27-million-line trace is read in a moment.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.specs.limits import MAX_CONTEXT_SOURCE, MAX_CONTEXT_TOKENS
from workloads.mooncake import TraceRequest


@dataclass(frozen=True)
class CsvFormat:
    name: str  # "burstgpt" | "azure"
    time_column: str
    input_column: str
    output_column: str
    header_example: str
    time_kind: str  # "seconds" | "datetime"


BURSTGPT = CsvFormat("burstgpt", "Timestamp", "Request tokens", "Response tokens",
                     "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", "seconds")
AZURE = CsvFormat("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", "TIMESTAMP,ContextTokens,GeneratedTokens", "datetime")
CSV_FORMATS = {f.name: f for f in (BURSTGPT, AZURE)}
CHUNK_ROWS = 200_000


@dataclass(frozen=True)
class CsvTrace:
    """The requests read, and what was left out (each count with its reason)."""

    format: str
    requests: list[TraceRequest]
    rows_read: int
    skipped_no_output: int  # 0 output tokens: a failed request in BurstGPT_*.csv
    skipped_no_input: int
    first_timestamp: str  # the trace's own first arrival, as written (the zero of its time axis)
    stopped_early: bool  # reading stopped past until_s (the file was in time order)

    def notes(self) -> list[str]:
        out = []
        if self.skipped_no_output:
            out.append(f"{self.skipped_no_output} rows with 0 output tokens skipped (failed requests in the trace)")
        if self.skipped_no_input:
            out.append(f"{self.skipped_no_input} rows with 0 input tokens skipped (nothing to send)")
        return out


def sniff_csv_format(path: Path, header: list[str]) -> CsvFormat:
    """The format whose columns the header holds; a header that is neither is refused with both layouts."""
    cols = {c.strip() for c in header}
    for f in CSV_FORMATS.values():
        if f.input_column in cols or f.time_column in cols:
            return f
    raise HarnessError(f"trace {path}: its header {','.join(header)[:200]!r} is not a known CSV trace; give BurstGPT "
                       f"({BURSTGPT.header_example}) or an Azure LLM inference trace ({AZURE.header_example}), or a "
                       "Mooncake .jsonl.")


def read_header(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            line = fh.readline()
    except UnicodeDecodeError as exc:
        raise HarnessError(f"trace {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); it is binary or compressed: "
                           "give the CSV itself (decompress it first).") from None
    except OSError as exc:
        raise HarnessError(f"trace {path} cannot be read ({exc}).") from None
    if not line.strip():
        raise HarnessError(f"trace {path} is empty; give a CSV trace with its header line.")

    return next(csv.reader([line]))


def read_csv_trace(path: str | Path, fmt: str | None = None, *, until_s: float | None = None,
                   max_requests: int | None = None) -> CsvTrace:
    """Read a BurstGPT or Azure CSV (`fmt` None: from its header). Every bad value is named with its line and column."""
    # lazy: pandas adds ~0.5 s to the start-up of bench-pd, engine, loop and sweep; only a trace file uses it
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"trace file {str(p)!r} does not exist; give a BurstGPT or Azure LLM inference CSV.")
    header = read_header(p)
    f = sniff_csv_format(p, header) if fmt is None else CSV_FORMATS[fmt]
    stripped = [c.strip() for c in header]
    missing = [c for c in (f.time_column, f.input_column, f.output_column) if c not in stripped]
    if missing:
        raise HarnessError(f"trace {p} ({f.name} CSV): missing column(s) {', '.join(repr(c) for c in missing)}; its header has "
                           f"{', '.join(repr(c) for c in stripped)}. A {f.name} trace starts with: {f.header_example}")
    names = {c: c.strip() for c in header}
    want = [c for c in header if names[c] in (f.time_column, f.input_column, f.output_column)]
    reqs: list[TraceRequest] = []
    rows = no_out = no_in = 0
    t_first: Any = None
    first_text = ""
    prev_t = -np.inf
    ordered = True
    stopped = False
    try:
        chunks = pd.read_csv(p, usecols=want, dtype=str, chunksize=CHUNK_ROWS, skip_blank_lines=False, keep_default_na=False,
                             encoding="utf-8")
        for chunk in chunks:
            chunk = chunk.rename(columns=names)
            line0 = rows + 2  # the header is line 1
            rows += len(chunk)
            t_abs = _times(p, f, chunk[f.time_column], line0)
            n_in = _counts(p, f, chunk[f.input_column], f.input_column, line0)
            n_out = _counts(p, f, chunk[f.output_column], f.output_column, line0)
            if t_first is None and len(chunk):
                t_first, first_text = t_abs[0], str(chunk[f.time_column].iloc[0]).strip()
            t_rel = t_abs - t_first
            if ordered and (len(t_rel) and (t_rel[0] < prev_t or (np.diff(t_rel) < 0).any())):
                ordered = False
            if len(t_rel):
                prev_t = t_rel[-1]
            keep = (n_out > 0) & (n_in > 0)
            no_out += int((n_out == 0).sum())
            no_in += int(((n_in == 0) & (n_out > 0)).sum())
            if until_s is not None:
                keep &= t_rel <= until_s
            for t, a, b in zip(t_rel[keep], n_in[keep], n_out[keep]):
                reqs.append(TraceRequest(float(t), int(a), int(b), ()))
                if max_requests is not None and len(reqs) >= max_requests:
                    stopped = True
                    break
            if stopped or (ordered and until_s is not None and len(t_rel) and t_rel[-1] > until_s):
                stopped = True
                break
    except UnicodeDecodeError as exc:
        raise HarnessError(f"trace {p} is not UTF-8 text ({exc.reason}); it is binary or compressed: give the CSV itself.") from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise HarnessError(f"trace {p} ({f.name} CSV) cannot be parsed as CSV ({str(exc).splitlines()[0][:200]}); "
                           f"it should start with: {f.header_example}") from None
    if not reqs:
        why = (f"; all {rows} rows had 0 input or output tokens" if rows and (no_in or no_out) else "")
        raise HarnessError(f"trace {p} has no requests{why}.")
    return CsvTrace(f.name, reqs, rows, no_out, no_in, first_text, stopped)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _times(p: Path, f: CsvFormat, col: Any, line0: int) -> np.ndarray:
    """Arrival times in seconds on the trace's own axis (absolute: seconds, or POSIX seconds of the datetime)."""
    # lazy: pandas adds ~0.5 s to the start-up of bench-pd, engine, loop and sweep; only a trace file uses it
    import pandas as pd

    text = col.str.strip()
    if f.time_kind == "seconds":
        t = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(t) | (t < 0)
        if bad.any():
            i = _first_bad(bad)
            raise HarnessError(f"{p}:{line0 + i}: {f.time_column} must be a number of seconds >= 0, got {text.iloc[i]!r}; "
                               "fix the trace line.")
        return t
    stamps = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    bad = stamps.isna().to_numpy()
    if bad.any():
        i = _first_bad(bad)
        raise HarnessError(f"{p}:{line0 + i}: {f.time_column} must be a date and time such as 2023-11-16 18:17:03.9799600 or "
                           f"2024-05-10 00:00:00.009930+00:00, got {text.iloc[i]!r}; fix the trace line.")
    # a zone-less 2023 stamp is read as UTC, like the 2024 ones that say +00:00; only differences are used
    return (stamps - pd.Timestamp("1970-01-01", tz="UTC")).dt.total_seconds().to_numpy(dtype=float)


def _counts(p: Path, f: CsvFormat, col: Any, name: str, line0: int) -> np.ndarray:
    # lazy: pandas adds ~0.5 s to the start-up of bench-pd, engine, loop and sweep; only a trace file uses it
    import pandas as pd

    text = col.str.strip()
    v = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v) | (v < 0) | (v != np.floor(v))
    if bad.any():
        i = _first_bad(bad)
        raise HarnessError(f"{p}:{line0 + i}: {name} must be an integer token count >= 0, got {text.iloc[i]!r}; fix the trace line.")
    big = v > MAX_CONTEXT_TOKENS
    if big.any():
        i = _first_bad(big)
        raise HarnessError(f"{p}:{line0 + i}: {name} = {int(v[i])} tokens is above {MAX_CONTEXT_TOKENS}, {MAX_CONTEXT_SOURCE}; "
                           "fix the trace line.")
    return v.astype(np.int64)
