"""The workload described by flags: every flag changes the artifact as stated and is stored in its metadata."""

import argparse
import math
from pathlib import Path

import pytest

from harness.errors import HarnessError
from workloads.artifact import load_artifact, save_artifact
from workloads.mooncake import SAMPLE_TRACE
from workloads.schedule import closed_loop, constant
from workloads.workload_spec import add_workload_arguments, build_workload, load_tokenizer, spec_from_args

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"


def _spec(*argv):
    p = argparse.ArgumentParser()
    add_workload_arguments(p)
    return spec_from_args(p.parse_args(list(argv)))


def test_distributions_are_seeded_and_recorded(tmp_path):
    spec = _spec("--input-tokens", "normal:mean=40,stdev=10,min=5,max=80", "--output-tokens", "uniform:min=3,max=9")
    a = build_workload(spec, constant(10.0, 5.0), seed=3)
    b = build_workload(spec, constant(10.0, 5.0), seed=3)
    assert a.content_hash == b.content_hash and a.count == 50
    n_in = [r["prompt_tokens_target"] for r in a.rows]
    assert min(n_in) >= 5 and max(n_in) <= 80 and len(set(n_in)) > 5
    assert all(len(r["prompt"].split()) == r["prompt_tokens_target"] for r in a.rows)  # one word per token here
    assert {r["max_tokens"] for r in a.rows} <= set(range(3, 10))
    art = load_artifact(save_artifact(a, tmp_path))
    assert art.meta["workload_spec"]["input_tokens"] == {"kind": "normal", "mean": 40, "stdev": 10.0, "min": 5, "max": 80}
    assert build_workload(spec, constant(10.0, 5.0), seed=4).content_hash != a.content_hash


def test_prefix_turns_and_pause():
    spec = _spec("--input-tokens", "30", "--output-tokens", "4", "--prefix-tokens", "10", "--turns", "3", "--pause-s", "0.5",
                 "--replies", "synthetic")
    art = build_workload(spec, constant(2.0, 2.0), seed=1)
    assert art.count == 4 * 3 and len(art.sessions()) == 4
    firsts = [r for r in art.rows if r["turn"] == 0]
    prefix = " ".join(firsts[0]["prompt"].split()[:10])
    assert all(r["prompt"].startswith(prefix) for r in art.rows) and all(r["prompt_tokens_target"] == 30 for r in firsts)
    s0 = art.sessions()[0]
    assert [r["pause_before_s"] for r in s0] == [0.0, 0.5, 0.5] and math.isnan(s0[1]["intended_s"])
    assert s0[1]["prompt"].startswith(s0[0]["prompt"]) and s0[2]["prompt"].startswith(s0[1]["prompt"])
    assert s0[1]["prompt_tokens_target"] == 30 + 4 + 30  # history + the stand-in answer + new text
    with pytest.raises(HarnessError, match="--prefix-tokens 40 is longer"):
        build_workload(_spec("--input-tokens", "30", "--prefix-tokens", "40"), constant(1.0, 2.0))


def test_live_replies_store_only_each_turns_new_text_and_seeded_think_times():
    spec = _spec("--input-tokens", "30", "--output-tokens", "4", "--turns", "3", "--pause-s", "exponential:mean=2")
    assert spec.replies == "live" and spec.pause_s.kind == "exponential"
    art = build_workload(spec, constant(2.0, 2.0), seed=1)
    assert art.meta["replies"] == "live" and art.meta["pause_s"]["kind"] == "exponential"
    s0 = art.sessions()[0]
    assert [r["prompt_tokens_target"] for r in s0] == [30, 30, 30]  # the history is the client's to send, with the replies
    assert not s0[1]["prompt"].startswith(s0[0]["prompt"])
    pauses = [r["pause_before_s"] for r in art.rows if r["turn"]]
    assert len(set(pauses)) == len(pauses) and 0.5 < sum(pauses) / len(pauses) < 5  # drawn, seeded, mean 2 s
    again = build_workload(spec, constant(2.0, 2.0), seed=1)
    assert again.content_hash == art.content_hash  # replayable: the same times from the same seed
    one = build_workload(_spec("--input-tokens", "30", "--output-tokens", "4"), constant(2.0, 2.0))
    assert one.meta["replies"] is None  # single-turn sessions have no replies to carry


@pytest.mark.parametrize("name", ["sharegpt.json", "prompts.jsonl", "hf_saved"])
def test_dataset_prompts(name):
    art = build_workload(_spec("--dataset", str(DATA / name)), constant(5.0, 2.0), seed=2, default_output_tokens=17)
    assert art.count == 10 and all(r["prompt"].startswith("question ") for r in art.rows)
    assert art.meta["dataset"]["prompts_read"] == 12
    outs = {r["max_tokens"] for r in art.rows}
    assert outs == {17} if name != "sharegpt.json" else outs <= set(range(5, 17))  # ShareGPT: the reply's length


def test_tokenizer_gives_exact_lengths_and_is_recorded():
    tok = load_tokenizer(str(DATA / "tokenizer"))
    art = build_workload(_spec("--tokenizer", str(DATA / "tokenizer"), "--input-tokens", "uniform:min=20,max=60",
                               "--output-tokens", "5"), constant(5.0, 2.0))
    assert all(tok.count(r["prompt"]) == r["prompt_tokens_target"] for r in art.rows)
    assert any(len(r["prompt"].split()) != r["prompt_tokens_target"] for r in art.rows)  # tokens, not words
    assert art.meta["token_counter"].startswith("tokenizer:")
    ds = build_workload(_spec("--tokenizer", str(DATA / "tokenizer"), "--dataset", str(DATA / "prompts.csv")), constant(2.0, 2.0))
    assert all(tok.count(r["prompt"]) == r["prompt_tokens_target"] for r in ds.rows)


def test_trace_replay_with_time_scale():
    a = build_workload(_spec("--trace", str(SAMPLE_TRACE)), constant(1.0, 1.0))
    b = build_workload(_spec("--trace", str(SAMPLE_TRACE), "--trace-time-scale", "0.5"), constant(1.0, 1.0))
    ta = [r["intended_s"] for r in a.rows]
    tb = [r["intended_s"] for r in b.rows]
    assert tb == pytest.approx([t * 0.5 for t in ta]) and a.meta["workload_spec"]["trace_time_scale"] == 1.0


def test_closed_loop_pool():
    art = build_workload(_spec("--input-tokens", "8", "--output-tokens", "2"), closed_loop(20, 5.0, 4))
    assert art.count == 20 and art.meta["schedule"]["kind"] == "closed-loop"


@pytest.mark.parametrize("argv,needle", [
    (["--turns", "0"], "--turns"), (["--pause-s", "-1"], "--pause-s"), (["--pause-s", "gauss:mean=1"], "--pause-s"),
    (["--pause-s", "uniform:min=3"], "uniform needs min and max"), (["--trace-time-scale", "0"], "--trace-time-scale"),
    (["--dataset", "x.json", "--trace", "y.jsonl"], "use one of them"), (["--dataset", "a.json", "--input-tokens", "5"], "synthetic"),
    (["--prefix-tokens", "-3"], "--prefix-tokens"),
])
def test_bad_combinations_are_refused(argv, needle):
    with pytest.raises(HarnessError, match=needle):
        _spec(*argv)


def test_tokenizer_folder_without_file(tmp_path):
    with pytest.raises(HarnessError, match="no tokenizer.json"):
        load_tokenizer(str(tmp_path))
