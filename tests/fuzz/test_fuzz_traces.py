"""Fuzz: Mooncake trace lines with any field values, read and expanded into a replay workload."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.specs.limits import MAX_CONTEXT_TOKENS
from tests.fuzz._contract import FUZZ, NASTY_VALUES, bounded_memory

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
GOOD = {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}

line = st.fixed_dictionaries({}, optional={"timestamp": st.one_of(NASTY_VALUES, st.floats(0, 1e6)),
                                           "input_length": st.one_of(NASTY_VALUES, st.integers(1, 2048)),
                                           "output_length": st.one_of(NASTY_VALUES, st.integers(1, 64)),
                                           "hash_ids": st.one_of(NASTY_VALUES, st.lists(st.integers(-3, 2**64), max_size=5))})


@FUZZ
@given(lines=st.lists(line, min_size=1, max_size=3))
def test_trace_lines(lines):
    from workloads.mixes import mooncake

    with tempfile.TemporaryDirectory(prefix="fuzz-trace-") as tmp:
        f = Path(tmp) / "t.jsonl"
        f.write_text("\n".join(json.dumps({**GOOD, **ln}, allow_nan=True) for ln in [{}, *lines]) + "\n")
        try:
            with bounded_memory():
                art = mooncake(str(f), max_requests=4)
        except HarnessError as exc:
            msg = str(exc)
            assert any(k in msg for k in FIELDS) or "not valid JSON" in msg, msg
            return
    for r in art.rows:
        assert 1 <= r["prompt_tokens_target"] <= MAX_CONTEXT_TOKENS and 1 <= r["max_tokens"] <= MAX_CONTEXT_TOKENS
        assert math.isfinite(r["intended_s"]) and r["intended_s"] >= 0
        assert len(r["prompt"].split()) == r["prompt_tokens_target"]


@FUZZ
@given(raw=st.binary(max_size=80))
def test_trace_bytes(raw):
    from workloads.mooncake import read_trace

    with tempfile.TemporaryDirectory(prefix="fuzz-trace-") as tmp:
        f = Path(tmp) / "t.jsonl"
        f.write_bytes(raw)
        try:
            read_trace(f)
        except HarnessError as exc:
            assert str(f) in str(exc)
