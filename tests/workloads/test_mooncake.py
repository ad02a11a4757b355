"""Mooncake trace reader: fields, hash ids expanded into shared prefix blocks, time scaling, bad lines named."""

import pytest

from harness.errors import HarnessError
from workloads.mixes import mooncake
from workloads.mooncake import BLOCK_TOKENS, SAMPLE_TRACE, TraceRequest, expand_prompt, read_trace


def test_sample_trace_reads():
    reqs = read_trace(SAMPLE_TRACE)
    assert len(reqs) == 40
    assert all(r.input_length > 0 and r.output_length > 0 for r in reqs)
    assert reqs[0].timestamp_s == pytest.approx(0.777)


def test_shared_hash_ids_give_shared_prefix_text():
    a = TraceRequest(0.0, 2 * BLOCK_TOKENS + 10, 5, (1, 2, 50))
    b = TraceRequest(1.0, 2 * BLOCK_TOKENS + 300, 5, (1, 2, 51))
    ta, tb = expand_prompt(a).split(), expand_prompt(b).split()
    assert len(ta) == a.input_length and len(tb) == b.input_length
    assert ta[: 2 * BLOCK_TOKENS] == tb[: 2 * BLOCK_TOKENS]
    assert ta[2 * BLOCK_TOKENS:] != tb[2 * BLOCK_TOKENS: 2 * BLOCK_TOKENS + 10]


def test_replay_artifact_scales_time():
    art = mooncake(str(SAMPLE_TRACE), time_scale=0.5, max_requests=10)
    reqs = read_trace(SAMPLE_TRACE, 10)
    assert art.count == 10
    assert art.rows[-1]["intended_s"] == pytest.approx((reqs[-1].timestamp_s - reqs[0].timestamp_s) * 0.5)
    assert [r["prompt_tokens_target"] for r in art.rows] == [r.input_length for r in reqs]
    assert all(len(r["prompt"].split()) == r["prompt_tokens_target"] for r in art.rows)


@pytest.mark.parametrize("line,msg", [
    ('{"timestamp": 1, "input_length": 0, "output_length": 3, "hash_ids": []}', "input_length"),
    ('{"timestamp": -1, "input_length": 5, "output_length": 3}', "timestamp"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 3, "hash_ids": ["a"]}', "hash_ids"),
    ("not json", "not valid JSON"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 3, "hash_ids": [-4]}', r"hash_ids must be a list of integers from 0"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1e20, "hash_ids": [1]}', "output_length must be an integer"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 100000000000000000000, "hash_ids": [1]}',
     r"output_length = 100000000000000000000 tokens is above 10485760, the longest context window"),
    ('{"timestamp": 1, "input_length": 9223372036854775807, "output_length": 3, "hash_ids": [1]}', "input_length = 9223372036854775807"),
    ('{"timestamp": 1e300, "input_length": 5, "output_length": 3}', "timestamp must be a number of milliseconds from 0"),
])
def test_bad_lines_are_named(tmp_path, line, msg):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1]}\n' + line + "\n")
    with pytest.raises(HarnessError, match=rf"t.jsonl:2: .*{msg}|t.jsonl:2: {msg}"):
        read_trace(p)


def test_binary_or_compressed_trace_is_a_clear_error(tmp_path):
    import gzip

    p = tmp_path / "t.jsonl"
    p.write_bytes(gzip.compress(b'{"timestamp": 0, "input_length": 5, "output_length": 3}\n'))
    with pytest.raises(HarnessError, match="is not UTF-8 text .*decompress it first"):
        read_trace(p)
