"""Prompt datasets on disk: each committed format reads the same 12 prompts; seeded sampling, length filters,
a hub name refused with the way to save it to disk."""

from pathlib import Path

import pytest

from harness.errors import HarnessError
from workloads.datasets import read_prompts, sample_prompts

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
FIRST = "question 0: explain the design of the system in a few words"


@pytest.mark.parametrize("name", ["sharegpt.json", "prompts.jsonl", "messages.jsonl", "prompts.parquet", "prompts.csv", "hf_saved"])
def test_every_format_reads_the_same_prompts(name):
    ps = read_prompts(DATA / name)
    assert len(ps) == 12 and ps[0].text == FIRST


def test_sharegpt_reply_gives_the_output_length():
    assert [p.output_tokens for p in read_prompts(DATA / "sharegpt.json")][:3] == [5, 6, 7]


def test_field_override_and_missing_column():
    assert read_prompts(DATA / "prompts.parquet", "question")[1].text.startswith("question 1")
    with pytest.raises(HarnessError, match="no column 'nope'; its columns: id, question"):
        read_prompts(DATA / "prompts.csv", "nope")


def test_hub_name_is_refused_with_the_fix():
    with pytest.raises(HarnessError, match="hub name.*save_to_disk"):
        read_prompts("anon8231489123/ShareGPT_Vicuna_unfiltered")


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(HarnessError, match="does not exist"):
        read_prompts(tmp_path / "x.json")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(HarnessError, match="unknown format"):
        read_prompts(tmp_path / "x.txt")
    (tmp_path / "bad.jsonl").write_bytes(b'{"prompt": "a"}\n\xff\xfe')
    with pytest.raises(HarnessError, match="not UTF-8"):
        read_prompts(tmp_path / "bad.jsonl")
    (tmp_path / "bad2.jsonl").write_text('{"prompt": "a"}\n{"other": 1}\n')
    with pytest.raises(HarnessError, match="bad2.jsonl:2"):
        read_prompts(tmp_path / "bad2.jsonl")


def test_seeded_sampling_and_filters():
    ps = read_prompts(DATA / "prompts.jsonl")
    chars = len  # every fixture prompt has 12 words; their lengths in characters differ
    a, na, info = sample_prompts(ps, 30, 7, count=chars, min_tokens=59, max_tokens=59)
    b, _, _ = sample_prompts(ps, 30, 7, count=chars, min_tokens=59, max_tokens=59)
    assert [p.text for p in a] == [p.text for p in b] and set(na) == {59}
    assert info["reused"] and 0 < info["prompts_in_bounds"] < 12
    c, _, _ = sample_prompts(ps, 30, 8, count=chars, min_tokens=59, max_tokens=59)
    assert [p.text for p in a] != [p.text for p in c]
    with pytest.raises(HarnessError, match="widen"):
        sample_prompts(ps, 3, 0, count=chars, min_tokens=1000)
