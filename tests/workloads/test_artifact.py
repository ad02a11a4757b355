"""Workload artifacts: the chapter's mixes, content hash, identical replay, tampering refused."""

import math

import pyarrow.parquet as pq
import pytest

from harness.errors import HarnessError
from workloads.artifact import load_artifact, save_artifact
from workloads.mixes import build_mix, startup_burst_schedule
from workloads.schedule import constant, poisson


def test_reasoning_mix_is_the_chapter_request():
    art = build_mix("reasoning", constant(1.0, 3.0))
    assert art.count == 3
    # chapter 9, example 9.2: 8192 input tokens, 1025 output tokens
    assert {r["prompt_tokens_target"] for r in art.rows} == {8192}
    assert {r["max_tokens"] for r in art.rows} == {1025}
    assert all(len(r["prompt"].split()) == 8192 for r in art.rows)


def test_prefix_mix_shares_6144_tokens():
    art = build_mix("prefix-6144", constant(1.0, 3.0))  # §9.2.4: 6144 cached of 8192
    words = [r["prompt"].split() for r in art.rows]
    assert words[0][:6144] == words[1][:6144] == words[2][:6144]
    assert words[0][6144:] != words[1][6144:]
    assert all(len(w) == 8192 for w in words)


def test_short_output_and_output_mix():
    assert {r["max_tokens"] for r in build_mix("short-output", constant(1.0, 2.0)).rows} == {129}
    mix = build_mix("mix-1025-4097", constant(10.0, 40.0), seed=2)
    outs = [r["max_tokens"] for r in mix.rows]
    assert set(outs) == {1025, 4097}
    assert outs.count(4097) / len(outs) == pytest.approx(0.5, abs=0.1)


def test_multi_turn_sessions_pause_and_grow():
    art = build_mix("multi-turn", constant(1.0, 2.0), turns=3, first_input_tokens=100, turn_input_tokens=20, output_tokens=10)
    sessions = art.sessions()
    assert len(sessions) == 2 and all(len(s) == 3 for s in sessions)
    s = sessions[0]
    assert s[0]["pause_before_s"] == 0.0 and s[1]["pause_before_s"] == 10.0  # §9.1.3: 10 s tool pauses
    assert math.isnan(s[1]["intended_s"])
    assert [r["prompt_tokens_target"] for r in s] == [100, 130, 160]
    assert s[1]["prompt"].startswith(s[0]["prompt"])
    assert [len(r["prompt"].split()) for r in s] == [100, 130, 160]


def test_startup_burst_backlog():
    sched = startup_burst_schedule(3.5, 10.0, 30.0)  # §9.6.1: 35 requests waiting at readiness
    art = build_mix("startup-burst", sched)
    assert sum(1 for r in art.rows if r["intended_s"] == 0.0) >= 35


def test_save_load_round_trip_is_identical(tmp_path):
    art = build_mix("scenario", poisson(2.0, 5.0, seed=4), input_tokens=64, output_tokens=8, seed=4)
    p = save_artifact(art, tmp_path)
    assert p.name == f"scenario-{art.content_hash[:12]}.parquet"
    back = load_artifact(p)
    assert back.content_hash == art.content_hash
    assert back.rows == art.rows
    # the same inputs build the same artifact (replayable identically)
    again = build_mix("scenario", poisson(2.0, 5.0, seed=4), input_tokens=64, output_tokens=8, seed=4)
    assert again.content_hash == art.content_hash


def test_a_changed_file_is_refused(tmp_path):
    art = build_mix("scenario", constant(2.0, 2.0), input_tokens=16, output_tokens=4)
    p = save_artifact(art, tmp_path)
    t = pq.read_table(p)
    rows = t.to_pylist()
    rows[0]["max_tokens"] = 999
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows).replace_schema_metadata(t.schema.metadata), p)
    with pytest.raises(HarnessError, match="does not match"):
        load_artifact(p)


def test_not_an_artifact(tmp_path):
    import pandas as pd

    p = tmp_path / "x.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(p)
    with pytest.raises(HarnessError, match="not a workload artifact"):
        load_artifact(p)
    with pytest.raises(HarnessError, match="does not exist"):
        load_artifact(tmp_path / "missing.parquet")


def test_unknown_mix():
    with pytest.raises(HarnessError, match="reasoning"):
        build_mix("nope", constant(1.0, 1.0))
